#!/usr/bin/env python
"""Scale benchmark: prints one JSON object of figures for an inventory of N NVL72 racks.

    .venv/bin/python benchmarks/scale.py --racks 1000 [--requests 60] [--reports 500]

Uses a fresh throw-away database: a temporary SQLite file (the embedded default) unless DATABASE_URL is
set (e.g. the PostgreSQL that `scripts/services.sh start` runs), in which case that database is flushed
and re-seeded — never point it at a database you care about. Page and API latencies are measured through
Django's full request stack in-process (middleware, auth, views, templates, ORM, database), without an
HTTP server in front.
"""

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def latency(client, urls: list[str]) -> dict:
    client.get(urls[0])  # warm caches and templates once
    samples = []
    for url in urls:
        started = time.perf_counter()
        response = client.get(url)
        samples.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"GET {url} answered {response.status_code}")
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(percentile(samples, 0.95), 2),
        "requests": len(samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--racks", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=60, help="requests per measured page or endpoint")
    parser.add_argument("--reports", type=int, default=500, help="node reports to ingest")
    args = parser.parse_args()

    scratch = tempfile.TemporaryDirectory(prefix="rackplane-bench-")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{scratch.name}/bench.sqlite3")
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from inventory.demo import seed_datacenter
    from inventory.discovery.nvidia_smi import FabricState, GpuHealth, ReportedGpu
    from inventory.models import ComputeTray, Gpu
    from inventory.services import ingest_report
    from tenancy.demo import seed_tenants
    from tenancy.models import Department, Membership

    settings.DEBUG = False  # no query log growing through the run
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)

    started = time.perf_counter()
    seed_datacenter(racks=args.racks)
    seed_s = time.perf_counter() - started
    # Departments, leads, jobs, telemetry and a day of quota history, so the dashboards have data to show.
    started = time.perf_counter()
    tenants = seed_tenants()
    seed_tenants_s = time.perf_counter() - started
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")

    rng = random.Random(1)
    user = get_user_model().objects.create_superuser("bench", "bench@example.com", "bench-password-1")
    client = Client()
    client.force_login(user)
    rack_names = [f"gb-r{n:0{max(2, len(str(args.racks)))}d}" for n in range(1, args.racks + 1)]
    gpu_pages = max(1, Gpu.objects.count() // 100)

    figures = {
        "racks": args.racks,
        "gpus": Gpu.objects.count(),
        "database": connection.vendor,
        "seed_s": round(seed_s, 2),
        "seed_tenants_s": round(seed_tenants_s, 2),
        "departments": tenants.departments,
        "jobs": tenants.jobs,
        "overview_page": latency(client, ["/"] * args.requests),
        "rack_list_page": latency(
            client,
            [
                f"/inventory/racks/?page={rng.randrange(1, max(2, args.racks // 50))}"
                for _ in range(args.requests)
            ],
        ),
        "rack_page": latency(
            client, [f"/inventory/racks/{rng.choice(rack_names)}/" for _ in range(args.requests)]
        ),
        "gpu_list_api": latency(
            client, [f"/api/v1/gpus/?page={rng.randrange(1, gpu_pages + 1)}" for _ in range(args.requests)]
        ),
        "gpu_list_api_filtered": latency(
            client,
            [f"/api/v1/gpus/?rack={rng.choice(rack_names)}&health=healthy" for _ in range(args.requests)],
        ),
    }
    # Department dashboards: the admin's (every department, capacity, idle GPUs cluster-wide) and one lead's
    # (the largest department, as its lead sees it).
    figures["admin_dashboard_page"] = latency(client, ["/tenancy/dashboard/"] * args.requests)
    figures["department_list_page"] = latency(client, ["/tenancy/departments/"] * args.requests)
    largest = Department.objects.order_by("-guaranteed_gpus", "name").first()
    lead = Membership.objects.filter(department=largest, role="lead").select_related("user").first().user
    lead_client = Client()
    lead_client.force_login(lead)
    figures["lead_dashboard_page"] = latency(
        lead_client, [f"/tenancy/departments/{largest.slug}/"] * args.requests
    )

    # Ingest: each report is one node's four GPUs, consistent or drifting, reconciled in one transaction.
    tray_ids = rng.sample(
        list(ComputeTray.objects.values_list("pk", flat=True)), k=min(args.reports, args.racks * 18)
    )
    reports = []
    for tray in ComputeTray.objects.filter(pk__in=tray_ids).select_related("rack", "partition"):
        clique = tray.partition.clique_id if rng.random() < 0.9 else 7
        reports.append(
            (
                tray.hostname,
                [
                    ReportedGpu(
                        uuid=gpu_uuid,
                        index=index,
                        cluster_uuid=str(tray.rack.cluster_uuid),
                        clique_id=clique,
                        state=FabricState.COMPLETED,
                        status="Success",
                        health=GpuHealth.HEALTHY,
                    )
                    for gpu_uuid, index in tray.gpus.order_by("index").values_list("uuid", "index")
                ],
            )
        )
    started = time.perf_counter()
    for host, gpus in reports:
        ingest_report(host, "json", gpus)
    elapsed = time.perf_counter() - started
    figures["ingest_reports_per_s"] = round(len(reports) / elapsed, 1)
    figures["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(json.dumps(figures, indent=2))
    scratch.cleanup()


if __name__ == "__main__":
    main()
