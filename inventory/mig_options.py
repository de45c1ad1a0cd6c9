"""The MIG layouts a tray may take, and how far its GPUs' reports show the chosen one (the tray page, the
scheduling service that sets a layout: scheduling.services.mig_layouts).

The catalogue (inventory.mig_layouts) is built from the MIG profiles its GPUs' model reported: the tray's
own GPUs when one of them is in MIG mode, else any GPU of the same product in the fleet (a GPU lists its
profiles only while in MIG mode, so a tray that never had MIG learns them from its peers).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.utils.translation import gettext as _

from inventory.choices import MigMode
from inventory.discovery.mig import GpuMig, MigProfile, MigReportError, gi_profile
from inventory.mig_layouts import MigLayout, catalogue, layout
from inventory.models import ComputeTray, Gpu


@dataclass(frozen=True)
class LayoutOptions:
    layouts: tuple[MigLayout, ...]
    source: str  # the GPU whose profiles the catalogue came from ("" when none reported any)
    product: str
    problem: str = ""  # why there is nothing to choose, in words
    profiles: tuple[MigProfile, ...] = ()
    # The tray of `source` when it is another tray's GPU (of the same model: no GPU of this tray listed any
    # profiles); "" when it is one of this tray's.
    source_tray: str = ""


def _profiles(gpu: Gpu) -> tuple[MigProfile, ...]:
    try:
        return GpuMig.from_dict(gpu.mig).profiles if gpu.mig else ()
    except MigReportError:
        return ()


def layout_options(tray: ComputeTray, gpus: list[Gpu] | None = None) -> LayoutOptions:
    """What the tray may be given, from the profiles its GPUs' model reported (newest report first). `gpus`:
    the tray's GPUs when the caller has them already; one more query only when none of them lists profiles."""
    gpus = list(tray.gpus.all()) if gpus is None else gpus
    product = next((g.product for g in gpus if g.product), "")
    candidates = [g for g in gpus if g.mig]
    if product and not any(_profiles(g) for g in candidates):
        candidates += list(
            Gpu.objects.filter(product=product, mig_mode=MigMode.ENABLED)  # the few in MIG mode (indexed)
            .exclude(tray=tray)
            .select_related("tray")
            .order_by("-last_report_at", "pk")[:20]
        )
    for gpu in candidates:
        profiles = _profiles(gpu)
        if profiles:
            other = gpu.tray.hostname if gpu.tray_id != tray.pk and gpu.tray_id else ""
            return LayoutOptions(
                tuple(catalogue(profiles)), gpu.uuid, product, profiles=profiles, source_tray=other
            )
    if any(g.mig_mode == MigMode.NOT_SUPPORTED for g in gpus):
        return LayoutOptions((), "", product, problem=_("These GPUs report that they cannot do MIG."))
    return LayoutOptions(
        (),
        "",
        product,
        problem=_(
            "No %(product)s has reported its MIG profiles yet. A GPU lists them only while in MIG mode: "
            "enable "
            "MIG on one GPU of this model (nvidia-smi -i 0 -mig 1) and let its agent report, then the "
            "layouts "
            "its driver offers appear here."
        )
        % {"product": product or _("GPU of this model")},
    )


@dataclass(frozen=True)
class LayoutStatus:
    """How far the tray's GPUs' last reports show its chosen layout."""

    layout: MigLayout | None
    applied: int  # GPUs whose report matches the layout
    gpus: int
    differs: tuple[str, ...] = ()  # per GPU that does not match yet: what it reports

    @property
    def done(self) -> bool:
        return self.layout is not None and self.gpus > 0 and self.applied == self.gpus


def reported_devices(gpu: Gpu) -> dict[str, int]:
    """The GPU instances a GPU reported, counted by profile ({"1g.23gb": 2, ...}; {} when none)."""
    try:
        mig = GpuMig.from_dict(gpu.mig) if gpu.mig else None
    except MigReportError:
        return {}
    if mig is None:
        return {}
    by_instance = {i.gpu_instance_id: gi_profile(i.profile) for i in mig.instances}
    return dict(Counter(by_instance.values()))


def _matches(gpu: Gpu, layout: MigLayout) -> bool:
    if not layout.enabled:
        return gpu.mig_mode != MigMode.ENABLED
    return gpu.mig_mode == MigMode.ENABLED and reported_devices(gpu) == layout.counts


def layout_summary(layout: MigLayout) -> str:
    """MigLayout.summary() (English, for logs and the API) in the viewer's language, for the pages."""
    if not layout.enabled:
        return _("MIG off (whole GPUs)")
    devices = ", ".join(f"{count} x {name}" for name, count in layout.devices)
    return _("%(devices)s per GPU") % {"devices": devices}


def _describe(gpu: Gpu) -> str:
    if gpu.mig_mode != MigMode.ENABLED:
        mode = gpu.get_mig_mode_display().lower() if gpu.mig_mode else _("not reported")
        return _("GPU %(index)s: MIG %(mode)s") % {"index": gpu.index, "mode": mode}
    devices = reported_devices(gpu)
    listed = ", ".join(f"{count} x {name}" for name, count in sorted(devices.items())) or _("no instances")
    return f"GPU {gpu.index}: {listed}"


def layout_status(tray: ComputeTray, layout: MigLayout | None, gpus: list[Gpu] | None = None) -> LayoutStatus:
    gpus = list(tray.gpus.all()) if gpus is None else gpus
    if layout is None:
        return LayoutStatus(None, 0, len(gpus))
    matching = [g for g in gpus if _matches(g, layout)]
    return LayoutStatus(
        layout,
        len(matching),
        len(gpus),
        differs=tuple(_describe(g) for g in gpus if g not in matching),
    )


def tray_layout(tray: ComputeTray) -> MigLayout | None:
    """The layout chosen for the tray (None: none), as stored (ComputeTray.mig_layout_devices)."""
    if not tray.mig_layout:
        return None
    return layout(tray.mig_layout, tray.mig_layout_devices or {})
