"""The desired state rendered once per push request, whatever the number of targets (integrations.state),
and each target's payload from it (its kind's `payload`, integrations.registry)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from django.core.exceptions import ValidationError

from integrations import registry
from integrations import state as configstate
from integrations.models import ConfigTarget


class Rendered:
    """The desired state rendered lazily and at most once, whatever the number of targets."""

    def __init__(self, *, fabric: bool = False):
        self._fabric = fabric
        self._cache: dict[str, Any] = {}

    def get(self, key: str, make: Callable[[], Any]) -> Any:
        """`make()` once per key; a rendering error is remembered and raised again for the next target."""
        if key not in self._cache:
            try:
                self._cache[key] = (True, make())
            except (ValueError, ValidationError) as error:
                self._cache[key] = (False, error)
        ok, value = self._cache[key]
        if not ok:
            raise value
        return value

    @property
    def state(self) -> configstate.ConfigState:
        return self.get("state", lambda: configstate.build_state(fabric=self._fabric))

    def objects(self) -> list[dict[str, Any]]:
        return self.get("objects", lambda: configstate.kubernetes_objects(self.state))

    def files(self) -> dict[str, str]:
        return self.get("files", lambda: configstate.render_files(self.state, self.objects()))

    def slurm(self, overrides: dict) -> dict[str, str]:
        """Slurm's files for one controller's node settings (cpus, memory, slurmd addresses) and topology
        file (`topology_format`: conf or yaml)."""
        key = "slurm:" + json.dumps(overrides, sort_keys=True)
        return self.get(key, lambda: configstate.slurm_files(self.state, **overrides))

    def slurm_accounts(self) -> list:
        """The Slurm account tree (integrations.slurm.render.SlurmAccount), departments and projects."""
        return self.get("slurm_accounts", lambda: configstate.slurm_accounts(self.state))

    def fabric_racks(self) -> list[dict]:
        if self.state.fabric is None:  # a caller that did not ask for the fabric up front
            self._fabric = True
            self._cache.pop("state", None)
        return self.get("fabric", lambda: configstate.fabric_racks(self.state))

    def payload_for(self, target: ConfigTarget) -> dict[str, Any]:
        """What `target` is sent: its kind's payload from this one rendering."""
        return registry.get(target.kind).payload(self, target.cleaned_settings())


def needs_fabric(targets: Iterable[ConfigTarget]) -> bool:
    return any(registry.is_kind(t.kind) and registry.get(t.kind).needs_fabric for t in targets)
