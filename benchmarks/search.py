"""Global search latency (portal/pages/search.py) for `benchmarks/scale.py --only search` (in `make bench`).

Each query goes through Django's full request stack in-process (middleware, auth, the view, the template,
the ORM, the database), as the pages part measures: `GET /search/?q=...`, answered with a redirect on an
exact match or with the grouped results. Five kinds of query, each `requests` times with different values
drawn from the seeded inventory, as a platform admin (sees everything: the largest result sets) and as a
department lead (every kind narrowed by `visible_to`):

* gpu_uuid: a whole GPU UUID (exact: a redirect to the GPU);
* tray_hostname: a whole tray hostname (exact: a redirect to the tray);
* rack_partial: the start of a rack name ("gb-r012": up to ten racks and their count);
* job_name: the start of a job name;
* job_whole_name: a whole job name (a redirect when one visible job has it, else the list, those first:
  the exact name is not indexed, see portal/pages/search.py);
* project: the start of a project's name (only when the database has projects);
* user: the start of a username.

The figure the product aims at: p95 under 100 ms for every kind at 1,000 racks (SEARCH_GOAL_MS).
"""

from __future__ import annotations

import random
import statistics
import time

SEARCH_GOAL_MS = 100
KINDS = ("gpu_uuid", "tray_hostname", "rack_partial", "job_name", "job_whole_name", "project", "user")


def _percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered) + 0.5) - 1))]


def queries(rng: random.Random, count: int) -> dict[str, list[str]]:
    """`count` search texts per kind, drawn from the database."""
    from django.contrib.auth import get_user_model

    from inventory.models import ComputeTray, Gpu, Rack
    from scheduling.models import Job
    from tenancy.models import Project

    def sample(values: list[str]) -> list[str]:
        return [rng.choice(values) for _ in range(count)] if values else []

    gpu_ids = list(Gpu.objects.values_list("pk", flat=True))
    uuids = list(
        Gpu.objects.filter(pk__in=rng.sample(gpu_ids, min(count, len(gpu_ids)))).values_list(
            "uuid", flat=True
        )
    )
    tray_ids = list(ComputeTray.objects.values_list("pk", flat=True))
    hostnames = list(
        ComputeTray.objects.filter(pk__in=rng.sample(tray_ids, min(count, len(tray_ids)))).values_list(
            "hostname", flat=True
        )
    )
    racks = list(Rack.objects.values_list("name", flat=True))
    jobs = list(Job.objects.values_list("name", flat=True).distinct()[:2000])
    users = list(get_user_model().objects.values_list("username", flat=True))
    projects = list(Project.objects.values_list("name", flat=True)[:2000])
    return {
        "gpu_uuid": sample(uuids),
        "tray_hostname": sample(hostnames),
        "rack_partial": [name[:-1] for name in sample(racks)],
        "job_name": [name[: max(3, len(name) // 2)] for name in sample(jobs)],
        "job_whole_name": sample(jobs),
        "project": [name[: max(2, len(name) // 2)] for name in sample(projects)],
        "user": [name[: max(2, len(name) // 2)] for name in sample(users)],
    }


def _time(client, texts: list[str]) -> dict:
    client.get("/search/", {"q": texts[0]})  # warm the template and the connection once
    samples = []
    exact = 0
    for text in texts:
        started = time.perf_counter()
        response = client.get("/search/", {"q": text})
        samples.append((time.perf_counter() - started) * 1000)
        if response.status_code not in (200, 302):
            raise SystemExit(f"GET /search/?q={text} answered {response.status_code}")
        exact += response.status_code == 302
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(_percentile(samples, 0.95), 2),
        "max_ms": round(max(samples), 2),
        "requests": len(samples),
        "exact_redirects": exact,
    }


def measure_search(rng: random.Random, requests: int = 60) -> dict:
    """Search latency per kind of query, as an admin and as a lead; `p95_ms`: the worst kind's p95."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from core.access import Role
    from tenancy.models import Membership

    texts = queries(rng, requests)
    admin, _ = get_user_model().objects.get_or_create(
        username="bench-search-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    lead = Membership.objects.filter(role=Role.LEAD).select_related("user").order_by("pk").first()
    viewers = {"admin": admin, **({"lead": lead.user} if lead else {})}
    figures: dict = {}
    for label, user in viewers.items():
        client = Client()
        client.force_login(user)
        figures[label] = {kind: _time(client, texts[kind]) for kind in KINDS if texts[kind]}
    worst = max(kind["p95_ms"] for viewer in figures.values() for kind in viewer.values())
    figures["p95_ms"] = worst
    figures["goal_ms"] = SEARCH_GOAL_MS
    return figures
