from django.apps import AppConfig
from django.utils.translation import gettext_lazy

from core.sentences import VALUE_WORDS


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = gettext_lazy("Inventory")

    def ready(self):
        # The templates of the sentences inventory stores in English (core.sentences): registered before any
        # page reads one back (a tray's fabric problems, the wizard's findings).
        from inventory import planning  # noqa: F401
        from inventory.discovery import nvidia_smi
        from inventory.ingest import gpus, reports  # noqa: F401

        _health_in_words(nvidia_smi)


def _health_in_words(nvidia_smi) -> None:
    """A GPU's fabric health inside a stored problem ("... fabric health is Unhealthy": nvidia-smi's word, as
    the API sends it) is read back in its label, as the GPU's health column shows it (core.sentences
    VALUE_WORDS)."""
    from inventory.choices import GpuHealth

    printed = nvidia_smi.HEALTH_WORDS  # the words the problem stores: {GpuHealth: nvidia-smi's word}
    VALUE_WORDS[nvidia_smi.FABRIC_HEALTH] = {
        "health": {word: GpuHealth(health).label for health, word in printed.items()}
    }
