"""The desired state rendered once per push request, whatever the number of targets (integrations.state),
and each target's payload from it (its kind's `payload`, integrations.registry).

A request may name the racks it changed (`scope`: a partition plan's rack). A kind that can apply part of
its configuration (`Kind.scoped_payload`: the fabric manager's partitions, the Kubernetes nodes' labels) is
then sent only those racks' slice (integrations.state.rack_slice), read for those racks only; the others
(whole files, such as Slurm's) get the whole state. integrations.pushes decides when a slice may be sent."""

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

    def __init__(self, *, fabric: bool = False, scope: Iterable[str] | None = None):
        self._fabric = fabric
        self._cache: dict[str, Any] = {}
        self.scope = tuple(sorted(set(scope))) if scope is not None else None

    def read_fabric(self, *, whole: bool) -> None:
        """Whether the whole state is read with every GPU (a fabric target sent the whole fabric), before it
        is read; a slice reads its racks' GPUs when a fabric target asks for them (`slice_fabric_racks`)."""
        self._fabric = whole

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

    @property
    def slice(self) -> configstate.RackSlice:
        """The scope's racks' slice of the state, with their GPUs (what a fabric target is sent: a rack's
        72 rows)."""
        scope = self.scope
        if scope is None:
            raise ValueError("this rendering has no scope: it renders the whole state")
        return self.get("slice", lambda: configstate.rack_slice(scope, fabric=True))

    def slice_fabric_racks(self) -> list[dict]:
        """The fabric payload of the scope's racks (`fabric_racks`, theirs alone)."""
        return self.get("slice_fabric", lambda: configstate.fabric_racks(self.slice))

    def slice_kubernetes_objects(self) -> list[dict[str, Any]]:
        """The Kubernetes objects of the scope's racks (state.kubernetes_rack_objects)."""
        return self.get("slice_objects", lambda: configstate.kubernetes_rack_objects(self.slice))

    def scoped(self, target: ConfigTarget) -> bool:
        """Whether `target` can be sent this request's slice alone (its kind applies parts)."""
        return (
            self.scope is not None
            and registry.is_kind(target.kind)
            and registry.get(target.kind).scoped_payload is not None
        )

    def payload_for(self, target: ConfigTarget, *, scoped: bool = False) -> dict[str, Any]:
        """What `target` is sent: its kind's payload from this one rendering; `scoped`: the slice of the
        scope's racks (`scoped(target)` must hold), marked with the racks it covers."""
        kind = registry.get(target.kind)
        if scoped and self.scoped(target):
            assert kind.scoped_payload is not None
            return {
                **kind.scoped_payload(self, target.cleaned_settings()),
                "scope": {"racks": list(self.scope or ())},
            }
        return kind.payload(self, target.cleaned_settings())


def needs_fabric(targets: Iterable[ConfigTarget]) -> bool:
    return any(registry.is_kind(t.kind) and registry.get(t.kind).needs_fabric for t in targets)
