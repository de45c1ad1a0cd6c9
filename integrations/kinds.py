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


def load() -> None:
    for module in KIND_MODULES:
        import_module(module)
