"""The kinds of target this installation knows: one line per folder under integrations/.

Each module's import registers its kind (integrations.registry.register); `load()` runs at start-up
(IntegrationsConfig.ready), so the target form, the push pipeline, dispatch and the API see every kind.
"""

from importlib import import_module

KIND_MODULES = [
    "integrations.directory.kind",
    "integrations.slurm.kind",
    "integrations.kubernetes.kind",
    "integrations.fabric.kind",
]

# Each registers its kind's tray drainer (integrations.registry.register_drainer; integrations.drain).
DRAINER_MODULES = [
    "integrations.slurm.drain",
    "integrations.kubernetes.drain",
]


def load() -> None:
    for module in KIND_MODULES + DRAINER_MODULES:
        import_module(module)
