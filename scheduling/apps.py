from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self):
        from django.core import checks

        from scheduling import signals
        from scheduling.checks import preemption_bounds

        signals.connect()
        checks.register(preemption_bounds)
