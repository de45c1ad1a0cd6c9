"""A database as the previous release left it, with data: `python -m tests.stack.previous_release` with
DATABASE_URL set (an empty database). Prints one JSON line: the ids and the API token it made.

The previous release is commit 2b15314: its project apps' last migrations are PREVIOUS_RELEASE (the apps
outside the project, auth, admin, sessions, authtoken ..., did not change since). The rows are written through
that state's historical models (what that release's code wrote), not today's.
"""

from __future__ import annotations

import json
import os
import secrets
import uuid
from decimal import Decimal

import django

PREVIOUS_RELEASE = [
    ("core", "0004_notifications"),
    ("inventory", "0007_health_default_rules"),
    ("tenancy", "0002_identity_providers"),
    ("scheduling", "0010_inventory_change_log"),
    ("integrations", "0002_kinds_from_registry"),
]


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    executor = MigrationExecutor(connection)
    project = {app for app, _ in PREVIOUS_RELEASE}
    others = [node for node in executor.loader.graph.leaf_nodes() if node[0] not in project | {"portal"}]
    targets = others + PREVIOUS_RELEASE
    executor.migrate(targets)
    old = MigrationExecutor(connection).loader.project_state(targets).apps

    User = old.get_model("auth", "User")
    Token = old.get_model("authtoken", "Token")
    Rack = old.get_model("inventory", "Rack")
    Partition = old.get_model("inventory", "NVLinkPartition")
    Tray = old.get_model("inventory", "ComputeTray")
    Gpu = old.get_model("inventory", "Gpu")
    Department = old.get_model("tenancy", "Department")
    Membership = old.get_model("tenancy", "Membership")
    Job = old.get_model("scheduling", "Job")
    Allocation = old.get_model("scheduling", "Allocation")
    JobEvent = old.get_model("scheduling", "JobEvent")

    now = timezone.now()
    lead = User.objects.create(username="previous-lead", password="!")
    token = Token.objects.create(user=lead, key=secrets.token_hex(20))
    rack = Rack.objects.create(name="prev-r01", cluster_uuid=uuid.uuid4(), location="hall A, row 1")
    partition = Partition.objects.create(rack=rack, clique_id=32766, name="default")
    trays = [
        Tray.objects.create(rack=rack, slot=slot, hostname=f"prev-r01-t{slot:02d}", partition=partition)
        for slot in range(1, 19)
    ]
    gpus = [
        Gpu.objects.create(
            tray=tray,
            index=index,
            uuid=f"GPU-{uuid.uuid4()}",
            product="NVIDIA GB200",
            health="healthy",
            memory_mib=189471,
        )
        for tray in trays
        for index in range(4)
    ]
    department = Department.objects.create(
        name="Previous research",
        slug="previous",
        guaranteed_gpus=36,
        over_quota_weight=Decimal("1.00"),
        vlan_id=901,
        vxlan_vni=19001,
        ib_pkey=0x0901,
        network_cidr="10.64.90.0/24",
        export_path="/exports/tenants/previous",
    )
    Membership.objects.create(user=lead, department=department, role="lead")
    job = Job.objects.create(
        department=department,
        submitted_by=lead,
        name="previous-train",
        gpus=8,
        state="running",
        backend="slurm",
        work={"script": "#!/bin/bash\nsrun python train.py\n"},
        placement=[trays[0].hostname, trays[1].hostname],
        backend_id="rendered/rp-previous",
        started_at=now,
        placed_at=now,
    )
    for gpu in gpus[:8]:
        Allocation.objects.create(job=job, gpu=gpu)
    JobEvent.objects.create(job=job, kind="started", placement=job.placement)
    print(
        json.dumps({"token": token.key, "job": job.pk, "department": department.slug, "gpus": len(gpus)}),
        flush=True,
    )


if __name__ == "__main__":
    main()
