from django.apps import AppConfig


class IntegrationsConfig(AppConfig):
    name = "integrations"
    verbose_name = "Integrations"

    def ready(self):
        # Each outside system registers its kind once (settings schema, renderer, adapter, job backend).
        from integrations import kinds, signals

        kinds.load()
        # Tenancy changes the configuration renders queue pushes (tenancy sits below: it cannot ask).
        signals.connect()
