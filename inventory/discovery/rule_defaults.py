"""The health rules a new database starts with (inventory migrations 0007 and 0009), from NVIDIA's XID
catalog (inventory.discovery.faults), NVML's recovery actions, fabric health and DCGM fields.

Pure Python (standard library only, no Django), like the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass

from inventory.discovery.faults import FABRIC_HEALTH, XID_CATALOG

# The rule defaults seeded into a new database (inventory migration 0007), from the catalog above:
# drain a tray for XIDs that need a GPU reset or a reboot; only warn for the "application" XIDs NVIDIA's own
# device plugin ignores; NVLink5 and software link-down faults degrade the tray's whole NVLink partition.
DRAIN_XIDS = ((48, 48), (79, 79), (95, 95), (119, 120), (140, 140), (144, 150), (155, 155))
# Immediate action RESET_GPU in the catalog too (109: NVIDIA says reset though the device plugin ignores it).
RESET_XIDS = ((46, 46), (62, 62), (64, 64), (109, 109), (143, 143), (158, 158))
WARN_XIDS = ((13, 13), (31, 31), (43, 43), (45, 45), (68, 68))
DEGRADE_XIDS = ((144, 150), (155, 155))


@dataclass(frozen=True)
class DefaultRule:
    """One rule a new database starts with (inventory.models.HealthRule; kinds and actions by value)."""

    name: str
    kind: str  # "xid" | "recovery_action" | FABRIC_HEALTH | "dcgm_field" | "check_failed" | "node_silent"
    action: str  # "drain" | "degrade" | "warn" | "hold" (node_silent only)
    xid_first: int | None = None
    xid_last: int | None = None
    code: str = ""
    threshold: float | None = None
    note: str = ""


def _xid_rule(first: int, last: int, action: str, why: str) -> DefaultRule:
    numbers = f"XID {first}" if first == last else f"XID {first}-{last}"
    names = ", ".join(XID_CATALOG[n].mnemonic for n in range(first, last + 1) if n in XID_CATALOG)
    actions = sorted({str(XID_CATALOG[n].action) for n in range(first, last + 1) if n in XID_CATALOG})
    verb = {"drain": "drain", "degrade": "degrade partition", "warn": "warn"}[action]
    return DefaultRule(
        name=f"{numbers} {verb}",
        kind="xid",
        action=action,
        xid_first=first,
        xid_last=last,
        note=f"{names}: NVIDIA's immediate action {', '.join(actions)}; {why}"[:300],
    )


def default_rules() -> list[DefaultRule]:
    """The safe defaults from NVIDIA's XID catalog for GB200, NVML's recovery actions, fabric health and
    DCGM fields. Admins edit them afterwards (Django admin: Health rules)."""
    rules = [_xid_rule(a, b, "drain", "the GPU needs a reset or the node a reboot") for a, b in DRAIN_XIDS]
    rules += [_xid_rule(a, b, "drain", "the catalog says reset the GPU") for a, b in RESET_XIDS]
    rules += [_xid_rule(a, b, "warn", "an application fault: the GPU is fine") for a, b in WARN_XIDS]
    rules += [
        _xid_rule(a, b, "degrade", "an NVLink fault affects every tray of the NVLink partition")
        for a, b in DEGRADE_XIDS
    ]
    for action in ("GPU_RESET", "NODE_REBOOT", "DRAIN_P2P", "DRAIN_AND_RESET"):
        rules.append(
            DefaultRule(
                name=f"recovery action {action} drain",
                kind="recovery_action",
                action="drain",
                code=action,
                note="NVML asks for this recovery before the GPU is used again",
            )
        )
    rules.append(
        DefaultRule(
            name="recovery action UNKNOWN warn",
            kind="recovery_action",
            action="warn",
            code="UNKNOWN",
            note="a recovery action this portal does not know (a newer driver): look at the GPU",
        )
    )
    for flag in (
        "ROUTE_UNHEALTHY",
        "DEGRADED_BANDWIDTH",
        "ACCESS_TIMEOUT_RECOVERY",
        "INCORRECT_CONFIGURATION",
    ):
        rules.append(
            DefaultRule(
                name=f"fabric {flag} degrade partition",
                kind=FABRIC_HEALTH,
                action="degrade",
                code=flag,
                note="NVLink fabric health: every tray of the NVLink partition is affected",
            )
        )
    rules.append(
        DefaultRule(
            name="fabric ROUTE_RECOVERY warn",
            kind=FABRIC_HEALTH,
            action="warn",
            code="ROUTE_RECOVERY",
            note="the fabric is recovering a route; degrade if it turns unhealthy",
        )
    )
    rules += [
        DefaultRule(
            name="DCGM row remap failure drain",
            kind="dcgm_field",
            action="drain",
            code="DCGM_FI_DEV_ROW_REMAP_FAILURE",
            threshold=1,
            note="memory rows could not be remapped: the GPU needs service",
        ),
        DefaultRule(
            name="DCGM NVLink link recovery failed degrade partition",
            kind="dcgm_field",
            action="degrade",
            code="DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS",
            threshold=1,
            note="an NVLink link could not recover",
        ),
        DefaultRule(
            name="DCGM NVSwitch fatal error degrade partition",
            kind="dcgm_field",
            action="degrade",
            code="DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS",
            threshold=1,
            note="a fatal NVSwitch error takes NVLink paths of the partition down",
        ),
    ]
    for name in (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    ):
        rules.append(
            DefaultRule(
                name=f"DCGM {name.removeprefix('DCGM_FI_DEV_')} warn",
                kind="dcgm_field",
                action="warn",
                code=name,
                threshold=100,
                note="NVLink errors since the GPU's last reset (a cumulative counter)",
            )
        )
    rules.append(
        DefaultRule(
            name="active check failed drain",
            kind="check_failed",
            action="drain",
            note="an active check the agent runs (dcgmi diag ...) failed, as Slurm's HealthCheckProgram",
        )
    )
    rules.append(NODE_SILENT_RULE)
    return rules


# A tray whose node stopped reporting (HealthSettings.node_silent_after_s) gets no new work and is not
# drained: its jobs may well be running fine while only the agent is down. "warn" (or disabling the rule)
# leaves it schedulable and only shows it stale.
NODE_SILENT_RULE = DefaultRule(
    name="node silent hold",
    kind="node_silent",
    action="hold",
    note="the node agent stopped reporting: place no new work there until it reports again (jobs keep "
    "running)",
)
