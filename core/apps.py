from django.apps import AppConfig
from django.utils.translation import gettext_lazy


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = gettext_lazy("Core")

    def ready(self):
        from django.core import checks

        from core import audit, task_names

        audit.connect()
        checks.register(task_names.check)  # every task name known, every beat entry naming one
