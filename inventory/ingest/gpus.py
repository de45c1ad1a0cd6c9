"""Reconciling the GPUs a node reports with the inventory's rows, and which GPUs a report may move.

Reports speak only for their credential's trays. A report authenticated by a rack's or a host's agent token
(`scope`) may list only GPUs the inventory does not know, GPUs on the token's trays, and GPUs detached from
one of them (Gpu.detached_from): a GPU on, or last on, any other tray would be moved onto the reporting tray,
which is the token reaching outside its rack. Such a report raises OutOfScope before anything is written,
and nothing of it is applied (inventory.api.discovery answers 403 and audits the attempt on the token). A
fleet token (scope None) may move any GPU: a real RMA moves GPUs between racks.
"""

import uuid
from dataclasses import replace
from datetime import timedelta

from django.db.models import F, Q
from django.db.models.functions import Coalesce, Lower

from core.audit import record_bulk_change
from core.sentences import CLAUSES, gettext_noop, say
from inventory.choices import MigMode
from inventory.discovery.nvidia_smi import ReportedGpu
from inventory.ingest.results import IngestResult, OutOfScope
from inventory.models import AgentToken, ComputeTray, Gpu, MigDevice

# A GPU another tray reported within this window is still that tray's: see contested.
CLAIM_WINDOW = timedelta(minutes=15)

# The GPU columns whose bulk changes are announced (attname -> field name where they differ); freshness,
# serial, product and memory are not decisions' inputs. A MIG mode change is announced only into or out of
# "enabled" (the first report saying "disabled" or "not supported" changes no decision).
_ANNOUNCED = (
    "tray_id",
    "index",
    "health",
    "fabric_state",
    "fabric_status",
    "reported_cluster_uuid",
    "reported_clique_id",
    "mig_mode",
)
_FIELD_NAME = {"tray_id": "tray"}


# A GPU reporting a MIG device another GPU holds (a tray's fabric problem): templates (core.sentences), stored
# in English, shown in the viewer's language.
MIG_HELD = gettext_noop(
    "GPU %(index)s (%(uuid)s) reports MIG device %(device)s, which GPU %(holder)s on %(holder_host)s holds"
)
MIG_HELD_SEEN = gettext_noop(
    "GPU %(index)s (%(uuid)s) reports MIG device %(device)s, which GPU %(holder)s on %(holder_host)s holds "
    "(last reported %(seen)s)"
)
NO_TRAY = gettext_noop("no tray")
MIG_NOT_UPDATED = gettext_noop("this GPU's MIG state is not updated until that GPU stops reporting it")
MIG_OUT_OF_SCOPE = gettext_noop(
    "this GPU's MIG state is not updated (that GPU is outside this token's scope)"
)


def require_in_scope(scope: AgentToken | None, tray: ComputeTray | None, host: str, known) -> None:
    """OutOfScope when `scope` (an agent token; None: a fleet token) may not speak for one of `known`, the
    inventory's rows of the GPUs a report for `host` (its tray `tray`, None if unknown) lists.

    A row is in scope when it sits on, or was detached from, the reporting tray or (rack tokens) a tray of
    the token's rack. No query unless a GPU is elsewhere (one, for the trays it names)."""
    if scope is None:
        return
    here = tray.pk if tray is not None else None
    where = {gpu.uuid: gpu.tray_id if gpu.tray_id is not None else gpu.detached_from_id for gpu in known}
    elsewhere = {uuid: pk for uuid, pk in where.items() if pk is None or pk != here}
    if not elsewhere:
        return
    trays = {
        pk: (hostname, rack_id, rack)
        for pk, hostname, rack_id, rack in ComputeTray.objects.filter(
            pk__in={pk for pk in elsewhere.values() if pk is not None}
        ).values_list("pk", "hostname", "rack_id", "rack__name")
    }
    offenders = []
    on_tray = {gpu.uuid for gpu in known if gpu.tray_id is not None}
    for uuid_, pk in sorted(elsewhere.items()):
        if pk is None:
            offenders.append({"gpu": uuid_, "tray": None, "rack": None, "where": "unknown"})
            continue
        hostname, rack_id, rack = trays[pk]
        if scope.rack_id is not None and rack_id == scope.rack_id:
            continue  # a rack token speaks for every tray of its rack
        where_ = "on" if uuid_ in on_tray else "detached from"
        offenders.append({"gpu": uuid_, "tray": hostname, "rack": rack, "where": where_})
    if offenders:
        raise OutOfScope(scope, host, offenders)


def contested(tray: ComputeTray, gpus: list[ReportedGpu], known, now) -> dict[str, str]:
    """GPUs of this report that another tray still holds, as {uuid: problem naming both hosts}.

    Rule: a GPU that another tray reported within CLAIM_WINDOW stays on that tray; this report leaves it
    alone and gets a problem instead (recorded on the tray with the others). A GPU physically moved is
    followed once its old tray stops reporting it: that tray's next report detaches it, or the window runs
    out. The report is still answered 200 and the rest of it applied, not refused with a 409: the agent
    cannot fix a duplicate claim by retrying, two hosts claiming one UUID is a fact about the fleet an
    operator must see on the tray, and refusing would also drop this node's health and clique updates.
    """
    reported = {gpu.uuid: gpu for gpu in gpus}
    since = now - CLAIM_WINDOW
    holders = [
        gpu
        for gpu in known
        if gpu.uuid in reported
        and gpu.tray_id not in (None, tray.pk)
        and gpu.last_report_at is not None
        and gpu.last_report_at >= since
    ]
    hosts = dict(
        ComputeTray.objects.filter(pk__in={gpu.tray_id for gpu in holders}).values_list("pk", "hostname")
    )
    return {
        gpu.uuid: (
            f"GPU {reported[gpu.uuid].index} ({gpu.uuid}) is also reported by {hosts[gpu.tray_id]}, which "
            f"reported it at {gpu.last_report_at:%Y-%m-%d %H:%M:%S %Z}; it stays on {hosts[gpu.tray_id]} and "
            f"is not moved to {tray.hostname} until {hosts[gpu.tray_id]} stops reporting it"
        )
        for gpu in holders
    }


def mig_claims(
    tray: ComputeTray, gpus: list[ReportedGpu], now, scope: AgentToken | None = None
) -> dict[str, str]:
    """GPUs of this report whose MIG UUIDs another GPU still holds, as {GPU uuid: problem}.

    The GPU rule (`contested`) for MIG devices: a MIG UUID another GPU's node reported within CLAIM_WINDOW
    stays with that GPU, and this report's MIG state for the GPU claiming it is not applied (a problem on the
    tray names both); a holder that stopped reporting gives it up (its rows go as this GPU's are written).
    A rack's or a host's agent token (`scope`) never takes one from a GPU outside what it speaks for
    (require_in_scope's rule), however long that GPU has been silent."""
    claimed = {
        instance.uuid.lower(): (gpu, instance.uuid)
        for gpu in gpus
        if gpu.mig is not None
        for instance in gpu.mig.instances
        if instance.uuid
    }
    if not claimed:
        return {}
    problems: dict[str, str] = {}
    since = now - CLAIM_WINDOW
    for device_uuid, holder, host, holder_tray, holder_rack, seen in (
        MigDevice.objects.annotate(lowered=Lower("uuid"))
        .filter(lowered__in=list(claimed))
        .values_list(
            "lowered",
            "gpu__uuid",
            "gpu__tray__hostname",
            "gpu__tray_id",
            "gpu__tray__rack_id",
            "gpu__last_report_at",
        )
    ):
        gpu, printed = claimed[device_uuid]
        in_scope = (
            scope is None
            or holder_tray == tray.pk
            or (scope.rack_id is not None and holder_rack == scope.rack_id)
        )
        silent = seen is None or seen < since
        if holder == gpu.uuid or (silent and in_scope) or gpu.uuid in problems:
            continue
        values = {"index": gpu.index, "uuid": gpu.uuid, "device": printed, "holder": holder}
        held = (
            say(MIG_HELD_SEEN, **values, holder_host=host or NO_TRAY, seen=f"{seen:%Y-%m-%d %H:%M:%S %Z}")
            if seen
            else say(MIG_HELD, **values, holder_host=host or NO_TRAY)
        )
        problems[gpu.uuid] = CLAUSES.join([held, MIG_NOT_UPDATED if in_scope else MIG_OUT_OF_SCOPE])
    return problems


def write_mig_devices(gpus: dict[int, dict]) -> None:
    """Replace the MIG device rows of the GPUs (pk -> GpuMig.as_dict()) with those their state lists; rows of
    other GPUs holding the same UUIDs (their nodes stopped reporting them: mig_claims) go."""
    rows = [
        MigDevice(
            gpu_id=pk,
            uuid=instance["uuid"],
            gpu_instance_id=instance["gpu_instance_id"],
            compute_instance_id=instance["compute_instance_id"],
            profile=instance["profile"],
            placement_start=instance["placement_start"],
            placement_size=instance["placement_size"],
        )
        for pk, state in gpus.items()
        for instance in state.get("instances", ())
        if instance.get("uuid") and instance.get("compute_instance_id") is not None
    ]
    MigDevice.objects.filter(gpu_id__in=list(gpus)).delete()
    if rows:
        MigDevice.objects.annotate(lowered=Lower("uuid")).filter(
            lowered__in=[row.uuid.lower() for row in rows]
        ).delete()
        MigDevice.objects.bulk_create(rows)


def reconcile_gpus(
    tray: ComputeTray, gpus: list[ReportedGpu], now, result: IngestResult, scope: AgentToken | None = None
) -> None:
    locked = list(
        Gpu.objects.select_for_update()
        .filter(Q(uuid__in=[gpu.uuid for gpu in gpus]) | Q(tray=tray))
        .order_by("pk")
    )
    listed = {gpu.uuid for gpu in gpus}
    require_in_scope(scope, tray, tray.hostname, [gpu for gpu in locked if gpu.uuid in listed])
    claims = contested(tray, gpus, locked, now)
    result.report.problems.extend(claims.values())
    result.contested = len(claims)
    gpus = [gpu for gpu in gpus if gpu.uuid not in claims]
    mig_held = mig_claims(tray, gpus, now, scope)
    result.report.problems.extend(mig_held.values())
    gpus = [replace(gpu, mig=None) if gpu.uuid in mig_held else gpu for gpu in gpus]
    reported = {gpu.uuid: gpu for gpu in gpus}
    known = {gpu.uuid: gpu for gpu in locked if gpu.uuid not in claims}

    # What each known GPU held before this report, for `bulk_changed` (the rows are loaded already).
    before = {gpu.pk: {name: getattr(gpu, name) for name in _ANNOUNCED} for gpu in known.values()}
    after = {pk: dict(values) for pk, values in before.items()}

    # GPUs that left this tray, and GPUs about to take a new place, first give up their (tray, index) so the
    # unique constraint never sees two GPUs on one position mid-update; each remembers the tray it left
    # (detached_from, cleared again for those placed below) for the scope check of later reports.
    vacate = []
    for gpu in known.values():
        wanted = reported.get(gpu.uuid)
        if wanted is None:
            result.removed.append(gpu.uuid)
            vacate.append(gpu)
        elif (gpu.tray_id, gpu.index) != (tray.pk, wanted.index):
            if gpu.tray_id not in (None, tray.pk):
                result.moved.append(gpu.uuid)
            vacate.append(gpu)
    vacated = {gpu.pk for gpu in vacate}
    if vacated:
        Gpu.objects.filter(pk__in=vacated).update(
            detached_from=Coalesce(F("tray"), F("detached_from")), tray=None, index=None
        )
        for pk in vacated:
            after[pk].update(tray_id=None, index=None)

    # One statement per kind of change whatever the GPUs: when every GPU changed alike (nothing but
    # freshness, or the whole tray's clique) one plain UPDATE; otherwise one UPDATE of the freshness of all
    # and one bulk_update (CASE per row) of the GPUs that changed, with the fields any of them changed.
    changes: dict[tuple, list[int]] = {}
    created = []
    mig_changed: list[Gpu] = []  # GPUs whose MIG instances or profiles changed (a JSON column: written apart)
    for wanted in gpus:
        values = {
            "tray_id": tray.pk,
            "index": wanted.index,
            "health": wanted.health.value,
            "fabric_state": wanted.state.value,
            "fabric_status": wanted.status or "",
            "detached_from_id": None,
        }
        if wanted.cluster_uuid is not None and wanted.clique_id is not None:
            values["reported_cluster_uuid"] = uuid.UUID(wanted.cluster_uuid)
            values["reported_clique_id"] = wanted.clique_id
        for name in ("serial", "product", "memory_mib"):
            if getattr(wanted, name):
                values[name] = getattr(wanted, name)
        if wanted.mig is not None:  # a report that does not say (text, CSV) leaves what was known
            values["mig_mode"] = wanted.mig.current.value
            values["mig_pending"] = wanted.mig.pending.value
        gpu = known.get(wanted.uuid)
        mig = wanted.mig.as_dict() if wanted.mig is not None else None
        if gpu is None:
            created.append(Gpu(uuid=wanted.uuid, last_report_at=now, mig=mig, **values))
            result.created.append(wanted.uuid)
            continue
        if mig is not None and gpu.mig != mig:
            gpu.mig = mig
            mig_changed.append(gpu)
        if gpu.pk in vacated:  # as the database has it now
            gpu.detached_from_id = gpu.tray_id if gpu.tray_id is not None else gpu.detached_from_id
            gpu.tray_id = gpu.index = None
        changed = tuple(
            sorted((name, value) for name, value in values.items() if getattr(gpu, name) != value)
        )
        changes.setdefault(changed, []).append(gpu.pk)
        after[gpu.pk].update((name, value) for name, value in changed if name in _ANNOUNCED)
    if len(changes) == 1:
        ((changed, pks),) = changes.items()
        Gpu.objects.filter(pk__in=pks).update(last_report_at=now, **dict(changed))
    elif changes:
        Gpu.objects.filter(pk__in=[pk for pks in changes.values() for pk in pks]).update(last_report_at=now)
        rows, fields = [], set()
        by_pk = {gpu.pk: gpu for gpu in known.values()}
        for changed, pks in changes.items():
            if not changed:
                continue
            fields.update(name for name, _ in changed)
            for pk in pks:
                gpu = by_pk[pk]
                for name, value in changed:
                    setattr(gpu, name, value)
                rows.append(gpu)
        # Each row writes every field any changed: its others as loaded (locked above; vacated rows were
        # set to no tray above, as the database has them).
        Gpu.objects.bulk_update(rows, sorted(fields))
    if mig_changed:
        Gpu.objects.bulk_update(mig_changed, ["mig"])
    if created:
        created = Gpu.objects.bulk_create(created)
    devices = {gpu.pk: gpu.mig for gpu in mig_changed}
    devices.update((gpu.pk, gpu.mig) for gpu in created if gpu.mig is not None)
    if devices:
        write_mig_devices(devices)
    announced = {}
    for pk, old in before.items():
        diff = {
            _FIELD_NAME.get(k, k): (v, after[pk][k])
            for k, v in old.items()
            if v != after[pk][k] and (k != "mig_mode" or MigMode.ENABLED in (v, after[pk][k]))
        }
        if diff:
            announced[pk] = diff
    record_bulk_change(Gpu, announced)
