"""The 10,000-rack benchmark's pieces (issue 32): the seed through COPY writes the rows bulk_create writes
(benchmarks/seeding.py, PostgreSQL), and the growth factors and goal verdicts (benchmarks/growth.py)."""

import json

import pytest
from django.apps import apps
from django.db import connection, transaction

from benchmarks import growth
from benchmarks.seeding import copy_seeding
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack
from portal.demo.seeding import seed_tenants
from scheduling.models import Allocation, Job, JobEvent

postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY is PostgreSQL's")


def snapshot() -> dict:
    """What the seed wrote, by natural keys (ids and the moment it ran differ between two seeds)."""
    seeded = {
        "racks": list(Rack.objects.order_by("name").values_list("name", "cluster_uuid", "location")),
        "partitions": list(
            NVLinkPartition.objects.order_by("rack__name", "clique_id").values_list(
                "rack__name", "clique_id", "name"
            )
        ),
        "trays": list(
            ComputeTray.objects.order_by("hostname").values_list(
                "hostname",
                "slot",
                "rack__name",
                "partition__clique_id",
                "ib_port_guids",
                "state",
                "state_reason",
                "fabric_problems",
                "reported_clique",
            )
        ),
        "gpus": list(
            Gpu.objects.order_by("uuid").values_list(
                "uuid",
                "tray__hostname",
                "index",
                "serial",
                "product",
                "memory_mib",
                "health",
                "fabric_state",
                "fabric_status",
                "reported_cluster_uuid",
                "reported_clique_id",
                "mig_mode",
            )
        ),
        "jobs": list(Job.objects.order_by("name").values_list("name", "department__slug", "gpus", "state")),
        "allocations": sorted(Allocation.objects.values_list("job__name", "gpu__uuid")),
        "events": sorted(JobEvent.objects.values_list("job__name", "kind", "message")),
    }
    seeded["rows"] = {model._meta.label: model.objects.count() for model in apps.get_models()}
    return seeded


def seeded_with(context) -> dict:
    with transaction.atomic():
        with context:
            seed_datacenter(racks=3)
            seed_tenants()
        taken = snapshot()
        transaction.set_rollback(True)
    return taken


@postgresql_only
@pytest.mark.slow(reason="seeds the demo's racks and tenants twice")
@pytest.mark.django_db(transaction=False)
def test_a_seed_through_copy_writes_the_rows_bulk_create_writes(monkeypatch):
    import contextlib

    from django.utils import timezone

    # Both seeds at one moment: the demo's telemetry history is cut at the minute it runs, so two seeds a
    # minute boundary apart write a different number of utilization rows (ci111: 2,726 against 2,732).
    moment = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: moment)
    through_inserts = seeded_with(contextlib.nullcontext())
    through_copy = seeded_with(copy_seeding())
    assert through_inserts["rows"]["inventory.Gpu"] == 3 * 72
    assert through_inserts["jobs"] and through_inserts["allocations"] and through_inserts["events"]
    for part in through_inserts:
        assert through_copy[part] == through_inserts[part], part
    # The objects came back saved, with the ids the sequence gave: a later save updates, never inserts again.
    with copy_seeding():
        rack = Rack.objects.bulk_create([Rack(name="gb-r99")])[0]
    assert rack.pk and not rack._state.adding
    rack.location = "hall Z"
    rack.save()
    assert Rack.objects.get(name="gb-r99").location == "hall Z"


def test_copy_seeding_leaves_bulk_create_as_it_was_after_the_block():
    from django.db.models.query import QuerySet

    original = QuerySet.bulk_create
    with pytest.raises(RuntimeError), copy_seeding():
        assert QuerySet.bulk_create is not original
        raise RuntimeError("a seed that fails")
    assert QuerySet.bulk_create is original


# --- growth factors and goals --------------------------------------------------------------------------


def figures(racks: int, scale: float) -> dict:
    return {
        "racks": racks,
        "machine": {"nproc": 2},
        "seed_s": 10 * scale,
        "rack_list_page": {"p95_ms": 50 * min(scale, 1.5), "requests": 60},
        "gpu_list_api_cursor": {"p95_ms": 20.0, "requests": 60},
        "search": {"p95_ms": 90 * scale**1.5},
        "scheduling_pass": {"run_pass_ms": 100 * scale, "cold": {"run_pass_ms": 900 * scale}},
        "ingest_reports_per_s": 300.0 / scale,
        "goals": {"search_p95_ms": 1.0},
    }


def test_growth_factors_name_constant_linear_and_worse_paths():
    grown = growth.growth(figures(10000, 10), figures(1000, 1), "stored")
    assert grown["racks_factor"] == 10
    factors, shapes = grown["factors"], grown["shapes"]
    assert factors["seed_s"] == 10 and shapes["seed_s"] == "linear"
    assert factors["rack_list_page.p95_ms"] == 1.5 and shapes["rack_list_page.p95_ms"] == "constant"
    assert shapes["search.p95_ms"] == "worse than linear"
    assert grown["worse_than_linear"] == ["search.p95_ms"]
    assert factors["ingest_reports_per_s"] == 0.1 and "ingest_reports_per_s" not in shapes  # a rate
    # What describes the run has no factor.
    assert not any(path.startswith(("machine.", "goals.")) or path.endswith("requests") for path in factors)
    assert "racks" not in factors


def test_goals_at_10000_racks_say_met_or_missed():
    goals = growth.goals_at_10000(figures(10000, 10))
    assert goals["at_goal_scale"] is True
    assert goals["scheduling_pass_warm_ms"] == {"figure": 1000, "under": 300, "verdict": "missed"}
    # The worse of the two passes after a typical change: more jobs waiting, or one rack's GPU changed.
    quick = {**figures(10000, 10), "scheduling_pass": {"run_pass_ms": 250, "cold": {"run_pass_ms": 2000}}}
    assert growth.goals_at_10000(quick)["scheduling_pass_warm_ms"]["verdict"] == "met"
    quick["scheduling_pass"]["after_one_rack_change"] = {"run_pass_ms": 320}
    assert growth.goals_at_10000(quick)["scheduling_pass_warm_ms"] == {
        "figure": 320,
        "under": 300,
        "verdict": "missed",
    }
    assert goals["scheduling_pass_cold_ms"]["verdict"] == "missed"
    assert goals["gpu_list_api_p95_ms_per_page"]["verdict"] == "met"
    assert goals["pages_p95_ms"] == {"figure": 75.0, "under": 300, "verdict": "met"}
    only_pages = growth.goals_at_10000({"racks": 1000, "rack_list_page": {"p95_ms": 400.0}})
    assert only_pages["at_goal_scale"] is False
    assert only_pages["pages_p95_ms"]["verdict"] == "missed"
    assert only_pages["scheduling_pass_warm_ms"]["verdict"] == "not measured (--only)"


def test_the_stored_1000_rack_run_is_found_for_the_same_parts_first(tmp_path):
    assert growth.find_baseline(("pages",), tmp_path) is None
    several = growth.store(figures(1000, 1), ("pages", "search"), tmp_path)
    assert growth.find_baseline(("search",), tmp_path) == several
    assert growth.find_baseline(("pass",), tmp_path) is None
    full = growth.store(figures(1000, 1), None, tmp_path)
    assert growth.find_baseline(("pages",), tmp_path) == full
    pages = growth.store(figures(1000, 1), ("pages",), tmp_path)
    assert pages.name == "scale-1000-pages.json"
    assert growth.find_baseline(("pages",), tmp_path) == pages
    assert json.loads(pages.read_text())["racks"] == 1000


def test_the_pages_see_telemetry_as_fresh_as_a_live_site_keeps_it(demo_inventory):
    # The year of jobs loaded before the pages takes longer than the staleness limit: the bench moves every
    # utilization row forward to now, each one's low run kept as long as it was (None stays None).
    from datetime import timedelta

    from django.utils import timezone

    from benchmarks.scale import fresh_telemetry
    from tenancy.activity import STALE_AFTER, fresh_activity
    from tenancy.models import GpuActivity

    then = timezone.now() - STALE_AFTER * 3
    gpus = list(Gpu.objects.order_by("pk")[:3])
    GpuActivity.objects.bulk_create(
        [
            GpuActivity(gpu=gpus[0], utilization=1.0, sampled_at=then, low_since=then - timedelta(hours=2)),
            GpuActivity(gpu=gpus[1], utilization=80.0, sampled_at=then - timedelta(minutes=1)),
            GpuActivity(gpu=gpus[2], utilization=2.0, sampled_at=then, low_since=then - timedelta(minutes=5)),
        ]
    )
    assert not fresh_activity(timezone.now()).exists()
    shift = fresh_telemetry()
    assert shift >= (STALE_AFTER * 3).total_seconds()
    rows = {row.gpu_id: row for row in GpuActivity.objects.all()}
    assert fresh_activity(timezone.now()).count() == 3
    moved = timedelta(seconds=shift)
    assert abs(rows[gpus[0].pk].sampled_at - (then + moved)) < timedelta(seconds=1)
    assert rows[gpus[0].pk].sampled_at - rows[gpus[0].pk].low_since == timedelta(hours=2)
    assert rows[gpus[1].pk].low_since is None
    assert rows[gpus[0].pk].sampled_at - rows[gpus[1].pk].sampled_at == timedelta(minutes=1)
    assert fresh_telemetry() < 1  # already fresh: nothing to move
