from django.apps import AppConfig
from django.utils.translation import gettext_lazy


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = gettext_lazy("Scheduling")

    def ready(self):
        from django.core import checks

        from scheduling import signals
        from scheduling.checks import preemption_bounds

        signals.connect()
        # Telemetry keeps a GPU's run of low samples only while a job holds it: scheduling.usage registers
        # the held GPUs with tenancy.activity when imported (tenancy sits below us).
        from scheduling import usage  # noqa: F401

        checks.register(preemption_bounds)
        # The templates of the sentences scheduling writes in English (core.sentences): registered before any
        # page reads one back (a job's reason, a what-if's notes).
        from scheduling import whatif, words  # noqa: F401
