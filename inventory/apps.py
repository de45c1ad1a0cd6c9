from django.apps import AppConfig
from django.utils.translation import gettext_lazy


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = gettext_lazy("Inventory")

    def ready(self):
        # The templates of the sentences inventory stores in English (core.sentences): registered before any
        # page reads one back (a tray's fabric problems, the wizard's findings).
        from inventory import planning  # noqa: F401
        from inventory.discovery import nvidia_smi  # noqa: F401
        from inventory.ingest import gpus, reports  # noqa: F401
