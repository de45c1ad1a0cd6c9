"""Discovery throughput for benchmarks/scale.py (part `ingest`): node reports per second, changed and
unchanged measured apart, in-process and through the real web stack.

* In-process (the service, no HTTP): `changed` reports reconciled in full (ingest_report: GPUs, health
  rules, audit; a report whose tray has no stored hash yet, as the first after seeding) and `unchanged`
  (the same report again: its canonical hash, one read, the last-seen time queued; the queued times are
  written at the end, included in the time).
* Over HTTP (with the stack): gunicorn with ONE sync worker and ONE Celery worker process (the issue's goal:
  18,000 nodes once a minute = 300 reports/s on one web and one worker process), posted by `clients`
  threads with per-rack agent tokens (rpa_..., as nodes authenticate), raw `nvidia-smi -q -x` XML as the
  agent sends it: `changed` (first report of each tray), `unchanged_full` (the same XML again), `hash_only`
  (`{"host", "report_sha256", "agent"}`), and the 99 % unchanged / 1 % changed mix the fleet sends, derived
  from those two (harmonic). Also: web processes a 1,000-rack site needs for that mix at 300 reports/s
  (each web process is one core's worth of sync workers; more processes need more cores).

The client threads run in this process on the same machine: they take CPU from the one web worker, so the
HTTP figures are a floor.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "tests" / "inventory" / "fixtures" / "nvidia_smi" / "gb200_default_partition.xml"
SAMPLE_CLUSTER = "3f7c2a91-5b1e-4d08-9c6a-2e4f8b0d1a73"
GOAL_PER_S = 300  # 18,000 trays once a minute
MIX_CHANGED = 0.01
AGENT = {"version": "0.1.0", "interval_s": 60}


def tray_xml(template: str, sample_uuids: list[str], tray, gpu_uuids: list[str]) -> str:
    text = template
    for sample_uuid, gpu_uuid in zip(sample_uuids, gpu_uuids, strict=True):
        text = text.replace(sample_uuid, gpu_uuid)
    text = text.replace(SAMPLE_CLUSTER, str(tray.rack.cluster_uuid))
    return text.replace("<cliqueId>32766</cliqueId>", f"<cliqueId>{tray.partition.clique_id}</cliqueId>")


def sample_trays(rng, count: int):
    from inventory.models import ComputeTray

    pks = list(ComputeTray.objects.filter(partition__isnull=False).values_list("pk", flat=True))
    chosen = rng.sample(pks, k=min(count, len(pks)))
    trays = list(ComputeTray.objects.filter(pk__in=chosen).select_related("rack", "partition"))
    rng.shuffle(trays)
    return trays


def bodies(trays) -> list[dict]:
    """Each tray's report as the agent posts it (raw XML with its own GPUs, cluster UUID and clique)."""
    from inventory.models import Gpu

    template = SAMPLE.read_text()
    sample_uuids = re.findall(r"<uuid>(GPU-[^<]+)</uuid>", template)
    uuids: dict[int, list[str]] = {}
    for tray_id, gpu_uuid in (
        Gpu.objects.filter(tray__in=trays).order_by("tray_id", "index").values_list("tray_id", "uuid")
    ):
        uuids.setdefault(tray_id, []).append(gpu_uuid)
    return [
        {"host": t.hostname, "nvidia_smi": tray_xml(template, sample_uuids, t, uuids[t.pk]), "agent": AGENT}
        for t in trays
        if len(uuids.get(t.pk, [])) == len(sample_uuids)
    ]


def measure_in_process(reports: list[dict]) -> dict:
    """Through the service functions (what the view calls), no HTTP."""
    from inventory.discovery import health_report
    from inventory.discovery.nvidia_smi import parse_any, validate_report
    from inventory.ingest.heartbeats import flush_heartbeats, heartbeat
    from inventory.ingest.reports import ingest_report, report_sha256

    parsed = []
    for body in reports:
        fmt, gpus = parse_any(body["nvidia_smi"])
        health, _ = health_report.validate_health(None, None, body["agent"])
        parsed.append((body["host"], fmt, validate_report(gpus), health))

    # A changed report may ask for a scheduling pass (a SchedulingRequest row, then a task on commit). In
    # production the worker runs it, coalesced; here Celery is eager and would run a whole pass per report
    # in this process: the task is counted, not run.
    from scheduling.services import pass_requests as scheduling_services

    sent: list[str] = []
    original = scheduling_services.send_now
    scheduling_services.send_now = lambda name, *args, **kwargs: sent.append(name)
    try:
        started = time.perf_counter()
        for host, fmt, gpus, health in parsed:
            ingest_report(host, fmt, gpus, health)
        changed_s = time.perf_counter() - started
    finally:
        scheduling_services.send_now = original

    started = time.perf_counter()
    hits = 0
    for host, fmt, gpus, health in parsed:
        hits += heartbeat(host, report_sha256(fmt, gpus, health)) is not None
    flush_heartbeats()
    unchanged_s = time.perf_counter() - started
    return {
        "reports": len(parsed),
        "changed_reports_per_s": round(len(parsed) / changed_s, 1),
        "unchanged_reports_per_s": round(len(parsed) / unchanged_s, 1),
        "unchanged_were_heartbeats": hits,
        "pass_requests_sent": len(sent),
        "note": "service functions in this process (parsing done beforehand), no HTTP; the scheduling passes "
        "changed reports ask for run in the worker, not timed here",
    }


def _post_all(url: str, items: list[tuple[str, dict]], clients: int) -> dict:
    """POST each (token, body) with `clients` threads; reports/s, latency and status counts."""
    import requests

    local = threading.local()
    statuses: dict[str, int] = {}
    latencies: list[float] = []
    lock = threading.Lock()

    def post(item):
        token, body = item
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        began = time.perf_counter()
        response = session.post(
            url,
            data=json.dumps(body),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=120,
        )
        took = time.perf_counter() - began
        with lock:
            statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1
            latencies.append(took)
        return response

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        answers = list(pool.map(post, items))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "reports": len(items),
        "reports_per_s": round(len(items) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))] * 1000, 1) if latencies else None,
        "statuses": statuses,
        "answers": answers,
    }


def measure_http(
    reports: list[dict], *, database_url: str, broker_url: str, scratch: Path, clients: int
) -> dict:
    from benchmarks import stack
    from inventory import agent_tokens
    from inventory.models import ComputeTray

    racks = dict(
        ComputeTray.objects.filter(hostname__in=[r["host"] for r in reports]).values_list(
            "hostname", "rack_id"
        )
    )
    tokens: dict[int, str] = {}
    from inventory.models import Rack

    for rack in Rack.objects.filter(pk__in=set(racks.values())):
        tokens[rack.pk] = agent_tokens.issue(rack=rack, description="bench")[1]
    token_of = {host: tokens[rack_id] for host, rack_id in racks.items()}
    # Warm-up needs an API token (GET /api/v1/jobs/) of a user: the first lead's.
    from rest_framework.authtoken.models import Token

    from tenancy.models import Membership

    lead = Membership.objects.filter(role="lead").select_related("user").first().user
    web = stack.Stack(
        database_url=database_url, broker_url=broker_url, scratch=scratch, web_workers=1, concurrency=1
    )
    try:
        web.start(Token.objects.get_or_create(user=lead)[0].key)
        url = web.url + "/api/v1/discovery/reports/"
        full = [(token_of[r["host"]], r) for r in reports]
        # Warm the one worker (its first discovery request loads the parser, serializers ...).
        # (Five, or half of a small run's reports, so that some are left to measure.)
        warm = min(5, len(full) // 2)
        if warm:
            _post_all(url, full[:warm], 1)
        rest = full[warm:]
        stack.log(f"discovery over HTTP: {len(rest)} changed reports, then unchanged, then hash-only")
        changed = _post_all(url, rest, clients)
        hashes = {}
        for (_token, body), answer in zip(rest, changed.pop("answers"), strict=True):
            if answer.status_code == 200:
                hashes[body["host"]] = answer.json().get("report_sha256", "")
        unchanged = _post_all(url, rest, clients)
        heartbeats = sum(
            1 for a in unchanged.pop("answers") if a.status_code == 200 and a.json().get("unchanged")
        )
        short = [
            (t, {"host": b["host"], "report_sha256": hashes[b["host"]], "agent": AGENT})
            for t, b in rest
            if hashes.get(b["host"])
        ]
        hash_only = _post_all(url, short, clients)
        hash_hits = sum(1 for a in hash_only.pop("answers") if a.status_code == 200)
        time.sleep(1.5)  # the worker's heartbeat batch (1 s) writes the last-seen times
    finally:
        web.stop()
    mix = 1 / ((1 - MIX_CHANGED) / hash_only["reports_per_s"] + MIX_CHANGED / changed["reports_per_s"])
    mix_full = 1 / ((1 - MIX_CHANGED) / unchanged["reports_per_s"] + MIX_CHANGED / changed["reports_per_s"])
    return {
        "web": "gunicorn portal.wsgi, 1 sync worker, DEBUG off; 1 Celery worker (concurrency 1)",
        "clients": clients,
        "auth": "per-rack agent tokens (Bearer rpa_...)",
        "body": "raw nvidia-smi -q -x XML (4 GB200 GPUs), as the agent sends it",
        "changed": changed,
        "unchanged_full": {**unchanged, "heartbeats": heartbeats},
        "hash_only": {**hash_only, "heartbeats": hash_hits},
        "mix_99_unchanged_hash_only_per_s": round(mix, 1),
        "mix_99_unchanged_full_body_per_s": round(mix_full, 1),
        "goal_per_s": GOAL_PER_S,
        "goal_met_with_one_web_process": mix >= GOAL_PER_S,
        "web_processes_needed_for_goal": math.ceil(GOAL_PER_S / mix),
        "web_processes_needed_for_goal_full_bodies": math.ceil(GOAL_PER_S / mix_full),
    }


def measure(
    args, rng, *, use_stack: bool, database_url: str | None, broker_url: str | None, scratch: Path
) -> dict:
    trays = sample_trays(rng, max(args.reports, 10))
    reports = bodies(trays)
    half = len(reports) // 2
    figures = {"in_process": measure_in_process(reports[:half] if use_stack else reports)}
    if use_stack:
        figures["http"] = measure_http(
            reports[half:],
            database_url=database_url,
            broker_url=broker_url,
            scratch=scratch,
            clients=args.discovery_clients,
        )
    else:
        figures["http"] = {"skipped": "--no-stack"}
    return figures
