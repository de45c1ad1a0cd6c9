from django.apps import AppConfig
from django.utils.translation import gettext_lazy


class IntegrationsConfig(AppConfig):
    name = "integrations"
    verbose_name = gettext_lazy("Integrations")

    def ready(self):
        # Each outside system registers its kind once (settings schema, renderer, adapter, job backend).
        from integrations import kinds, signals

        kinds.load()
        # Tenancy changes the configuration renders queue pushes (tenancy sits below: it cannot ask).
        signals.connect()
        # The templates of the sentences integrations stores in English (core.sentences): registered before
        # any page reads one back, whichever app's page shows it (a tray drained for a plan, a push's reason).
        from integrations import words  # noqa: F401
        from integrations.fabric import base  # noqa: F401
        from integrations.plans import windows  # noqa: F401
