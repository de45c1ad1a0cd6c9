"""The node agent against the real portal (pytest-django's live server) with real agent tokens.

Each test runs agent/rackplane_agent.py as a node does (a separate python3, standard library only) with a fake
`nvidia-smi` printing the tray's real-format XML and a kernel log file, and checks what reached the portal
(the tray's GPUs in the database), what the agent remembered (its state file) and what it said (stderr).
Nothing stands between the agent and the portal: a portal that is down is a closed port, a portal that
throttles is the portal's own throttle.
"""

from __future__ import annotations

import itertools
import json
import re
import time

import pytest

from inventory.models import ComputeTray, Gpu, HealthCheckResult, HealthEvent
from tests.agent.conftest import (
    HOST,
    SAMPLE,
    SAMPLE_CLUSTER,
    SAMPLE_PCI,
    fake_nvidia_smi,
    issue_token,
    lines,
    read_state,
    run_agent,
    tray_xml,
    xid_line,
)

# Each test starts agent processes against a live server: `make test` runs them, test-fast does not.
pytestmark = [
    pytest.mark.slow(reason="runs agent processes against a live server"),
    pytest.mark.django_db(transaction=True),
]


class Node:
    """One compute tray as the agent sees it: its token file, nvidia-smi, kernel log and state file."""

    def __init__(self, folder, host: str = HOST, token=None):
        self.folder, self.host = folder, host
        self.tray = ComputeTray.objects.select_related("rack", "partition").get(hostname=host)
        self.token = token or issue_token(folder, hostname=host)
        self.nvidia_smi = fake_nvidia_smi(folder, tray_xml(self.tray), name=f"nvidia-smi-{host}")
        self.kernel_log = folder / f"kern-{host}.log"
        self.kernel_log.write_text("")
        self.state = folder / f"state-{host}.json"

    def log(self, *text: str) -> None:
        with self.kernel_log.open("a") as handle:
            handle.write("".join(text))

    def args(self, portal: str, *extra: str) -> list[str]:
        return [
            "--portal", portal,
            "--host", self.host,
            "--token-file", str(self.token),
            "--nvidia-smi", str(self.nvidia_smi),
            "--kernel-log", str(self.kernel_log),
            "--state-file", str(self.state),
            *extra,
        ]  # fmt: skip

    def once(self, portal: str, *extra: str):
        return run_agent(*self.args(portal, "--once", *extra))

    def dry_run(self, *extra: str) -> dict:
        done = run_agent(*self.args("http://127.0.0.1:9", "--dry-run", *extra))
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture
def rack(transactional_db):
    from inventory.demo import seed_datacenter

    seed_datacenter(racks=1)


@pytest.fixture
def node(rack, tmp_path):
    return Node(tmp_path)


def texts(xids: list[dict]) -> list[str]:
    return [x["text"] for x in xids]


# --- one report ----------------------------------------------------------------------------------------


def test_one_report_lands_the_trays_gpus_in_the_inventory(live_server, node):
    uuids = list(node.tray.gpus.order_by("index").values_list("uuid", flat=True))
    Gpu.objects.filter(tray=node.tray).delete()  # the portal learns them from the report alone

    done = node.once(live_server.url)

    assert done.returncode == 0, done.stderr
    assert lines(done.stderr, "posted the report for gb-r01-t03: 200, 4 GPUs"), done.stderr
    gpus = list(Gpu.objects.filter(tray__hostname=HOST).order_by("index").values_list("uuid", "serial"))
    assert [uuid for uuid, _ in gpus] == uuids
    assert [serial for _, serial in gpus] == re.findall(r"<serial>(\d+)</serial>", SAMPLE.read_text())
    tray = ComputeTray.objects.get(hostname=HOST)
    assert tray.last_report_at is not None and tray.fabric_problems == []
    assert tray.last_report["format"] == "xml"


def test_a_fleet_token_reports_too(live_server, node, node_agent, tmp_path):
    """The fleet token (an API token: `Authorization: Token ...`) still reports for any host."""
    from rest_framework.authtoken.models import Token

    fleet = tmp_path / "fleet-token"
    fleet.write_text(Token.objects.get(user=node_agent).key)
    fleet.chmod(0o600)
    node.token = fleet
    before = ComputeTray.objects.get(hostname=HOST).last_report_at

    done = node.once(live_server.url)

    assert done.returncode == 0, done.stderr
    assert ComputeTray.objects.get(hostname=HOST).last_report_at != before


def test_the_dry_run_prints_the_report_and_posts_and_remembers_nothing(node):
    node.log(xid_line(79, note="GPU has fallen off the bus."))
    before = ComputeTray.objects.get(hostname=HOST).last_report_at

    body = node.dry_run()

    assert body["host"] == HOST and body["nvidia_smi"] == node.nvidia_smi.with_suffix(".xml").read_text()
    assert body["agent"] == {"version": "0.1.0", "interval_s": 60}
    [xid] = body["xids"]
    assert xid["xid"] == 79 and xid["pid"] == 4242 and xid["pci_bus_id"] == SAMPLE_PCI[0]
    assert xid["text"].startswith("NVRM: Xid (PCI:0008:01:00): 79, pid=4242")
    assert not node.state.exists() and ComputeTray.objects.get(hostname=HOST).last_report_at == before
    assert node.dry_run()["xids"] == [xid]  # nothing was remembered: the same line is still new


# --- XIDs: each once, in order, across restarts and failures ---------------------------------------------


def test_xids_are_sent_once_in_order_across_restarts(live_server, node):
    node.log(
        xid_line(13, note="first"),
        "an unrelated kernel line\n",
        xid_line(31, pci="0009:01:00", note="second"),
    )
    done = node.once(live_server.url)
    assert done.returncode == 0, done.stderr
    assert lines(done.stderr, "2 XIDs, 0 check results"), done.stderr
    state = read_state(node.state)
    assert state["kernel_log"]["offset"] == node.kernel_log.stat().st_size and state["pending_xids"] == []

    # A third line, and a fourth still being written (no newline yet): a new run sends the third alone.
    node.log(xid_line(43, note="third"), xid_line(45, note="fourth").rstrip("\n"))
    assert [(x["xid"], x["text"][-5:]) for x in node.dry_run()["xids"]] == [(43, "third")]
    done = node.once(live_server.url)
    assert done.returncode == 0 and lines(done.stderr, "1 XIDs"), done.stderr

    node.log("\n")  # the fourth line is complete now
    assert [x["xid"] for x in node.dry_run()["xids"]] == [45]
    assert node.once(live_server.url).returncode == 0
    assert "xids" not in node.dry_run()  # nothing left, nothing repeated
    # The portal counts a fault seen again (same XID, same GPU) on its event: each arrived once.
    events = HealthEvent.objects.filter(tray__hostname=HOST).values_list("xid", "gpu_uuid", "count")
    gpus = dict(node.tray.gpus.values_list("index", "uuid"))
    assert sorted(events) == [(13, gpus[0], 1), (31, gpus[1], 1), (43, gpus[0], 1), (45, gpus[0], 1)]


def test_a_report_that_did_not_reach_the_portal_keeps_its_xids(live_server, node, closed_port):
    node.log(xid_line(48, note="a"), xid_line(48, note="b"))
    down = node.once(closed_port)
    assert down.returncode == 1
    assert lines(down.stderr, f"the portal at {closed_port}/api/v1/discovery/reports/ cannot be reached"), (
        down.stderr
    )
    state = read_state(node.state)
    assert texts(state["pending_xids"])[0].endswith("a") and len(state["pending_xids"]) == 2
    assert state["kernel_log"]["offset"] == node.kernel_log.stat().st_size  # read once, kept

    node.log(xid_line(48, note="c"))
    up = node.once(live_server.url)
    assert up.returncode == 0 and lines(up.stderr, "3 XIDs"), up.stderr
    assert read_state(node.state)["pending_xids"] == []
    [event] = HealthEvent.objects.filter(tray__hostname=HOST)
    assert (event.xid, event.count, event.gpu.index) == (48, 3, 0)  # a, b and c, once each


def test_an_xid_from_a_node_whose_nvidia_smi_fails_is_kept_until_it_gets_through(live_server, node):
    """XID 79 is when nvidia-smi fails ("GPU is lost"). The agent posts the XIDs without a GPU listing; a
    portal that wants one refuses the report (not its XIDs), and the XID goes with the next report."""
    lost = node.folder / "nvidia-smi-lost"
    lost.write_text(
        "#!/bin/sh\necho 'Unable to determine the device handle for GPU0008:01:00.0: GPU is lost.  "
        "Reboot the system to recover this GPU' >&2\nexit 15\n"
    )
    lost.chmod(0o755)
    healthy = node.nvidia_smi
    node.nvidia_smi = lost
    node.log(xid_line(79, note="GPU has fallen off the bus."))

    body = node.dry_run()
    assert "nvidia_smi" not in body and [x["xid"] for x in body["xids"]] == [79]
    first = node.once(live_server.url)
    assert lines(first.stderr, "-q -x failed (exit status 15): Unable to determine the device handle"), (
        first.stderr
    )
    if first.returncode == 0:  # a portal that takes XIDs without a GPU listing
        assert read_state(node.state)["pending_xids"] == []
    else:
        assert lines(first.stderr, "refused the report for gb-r01-t03 with 400"), first.stderr
        assert [x["xid"] for x in read_state(node.state)["pending_xids"]] == [79]  # kept: not its fault
        node.nvidia_smi = healthy
        second = node.once(live_server.url)
        assert second.returncode == 0 and lines(second.stderr, "1 XIDs"), second.stderr
    [event] = HealthEvent.objects.filter(tray__hostname=HOST, kind="xid")
    assert (event.xid, event.count) == (79, 1)


def test_a_hung_nvidia_smi_is_stopped_at_its_timeout(node):
    hung = node.folder / "nvidia-smi-hung"
    hung.write_text("#!/bin/sh\nsleep 60\n")
    hung.chmod(0o755)
    node.nvidia_smi = hung
    node.log(xid_line(79))
    started = time.monotonic()
    body = node.dry_run("--nvidia-smi-timeout", "1")
    assert time.monotonic() - started < 10
    assert "nvidia_smi" not in body and [x["xid"] for x in body["xids"]] == [79]


def test_nothing_to_report_is_no_report(live_server, node):
    node.nvidia_smi = node.folder / "missing-nvidia-smi"
    done = node.once(live_server.url)
    assert done.returncode == 1
    assert lines(done.stderr, "nvidia-smi was not found at"), done.stderr
    assert lines(done.stderr, "nothing to report this time"), done.stderr


def test_xids_waiting_for_the_portal_are_bounded_oldest_dropped(node, closed_port):
    node.log(*(xid_line(13, note=f"line {n}") for n in range(5)))
    done = node.once(closed_port, "--max-pending-xids", "3")
    assert done.returncode == 1
    assert lines(done.stderr, "2 XIDs were dropped, the oldest first: more than 3 waited"), done.stderr
    state = read_state(node.state)
    assert [t[-6:] for t in texts(state["pending_xids"])] == ["line 2", "line 3", "line 4"]
    assert state["dropped_xids"] == 2


def test_identical_lines_in_the_same_second_are_each_sent(live_server, node):
    """kern.log stamps lines to the second (here: to the microsecond, the same one): the portal refuses the
    same entry twice, so the agent sends the second a microsecond later instead of dropping it."""
    line = xid_line(13, note="Graphics Exception: ESR 0x404600=0x80000002")
    node.log(line, line)
    xids = node.dry_run()["xids"]
    assert len(xids) == 2 and xids[0]["text"] == xids[1]["text"] and xids[0]["time"] < xids[1]["time"]
    done = node.once(live_server.url)
    assert done.returncode == 0 and lines(done.stderr, "2 XIDs"), done.stderr


# --- active checks ----------------------------------------------------------------------------------------


def test_an_active_check_runs_on_its_interval_and_its_result_is_reported(live_server, node):
    check = ["--check-command", "sh -c 'echo diag level 2: pass; exit 0'", "--check-interval", "3600"]
    [result] = node.dry_run(*check)["checks"]
    assert result["name"] == "sh -c 'echo diag level 2: pass; exit 0'"
    assert result["exit_status"] == 0 and result["output"] == "diag level 2: pass\n"
    assert result["seconds"] >= 0 and result["started"].endswith("+00:00")

    done = node.once(live_server.url, *check)
    assert done.returncode == 0 and lines(done.stderr, "0 XIDs, 1 check results"), done.stderr
    again = node.once(live_server.url, *check)  # within the interval: not run again
    assert again.returncode == 0 and not lines(again.stderr, "running the check"), again.stderr
    assert read_state(node.state)["pending_checks"] == []


def test_a_check_that_fails_hangs_or_cannot_run_is_reported_as_such(node):
    failing = node.dry_run("--check-command", "sh -c 'echo ERROR: GPU 2 failed >&2; exit 3'")["checks"]
    assert [(c["exit_status"], c["output"]) for c in failing] == [(3, "ERROR: GPU 2 failed\n")]

    started = time.monotonic()
    [hung] = node.dry_run("--check-command", "sh -c 'echo started; sleep 30'", "--check-timeout", "1")[
        "checks"
    ]
    assert time.monotonic() - started < 15
    assert hung["exit_status"] == 124
    assert hung["output"] == "started\n[rackplane-agent: the check was stopped after 1 s]"

    [missing] = node.dry_run("--check-command", "/nonexistent/dcgmi diag -r 2")["checks"]
    assert missing["exit_status"] == 127 and "cannot run '/nonexistent/dcgmi diag -r 2'" in missing["output"]


def test_a_check_output_is_cut_to_its_last_64_kib(node):
    [result] = node.dry_run("--check-command", "python3 -c \"print('x' * 70000 + 'é' * 10, end='THE END')\"")[
        "checks"
    ]
    assert len(result["output"].encode()) <= 64 * 1024 and result["output"].endswith("é" * 10 + "THE END")


# --- the portal down, throttling, refusing --------------------------------------------------------------


def test_a_refusal_is_logged_with_the_portals_message(live_server, node, tmp_path):
    from inventory import agent_tokens
    from inventory.models import AgentToken

    node.log(xid_line(79))
    other = issue_token(tmp_path, hostname="gb-r01-t04")  # a token for another tray
    node.token = other
    done = node.once(live_server.url)
    assert done.returncode == 1
    assert lines(done.stderr, "refused the report for gb-r01-t03 with 403: Agent token rpa_"), done.stderr
    assert lines(done.stderr, "it may not report for host 'gb-r01-t03'"), done.stderr
    assert len(read_state(node.state)["pending_xids"]) == 1  # not the XID's fault: kept

    own = issue_token(tmp_path, hostname=HOST)
    agent_tokens.revoke(AgentToken.objects.get(secret_hash=agent_tokens.hash_secret(own.read_text().strip())))
    node.token = own
    done = node.once(live_server.url)
    assert done.returncode == 1 and lines(done.stderr, "with 401: Agent token rpa_"), done.stderr
    assert lines(done.stderr, "was revoked at"), done.stderr


def test_the_token_file_must_be_there_and_should_be_private(live_server, node, tmp_path):
    node.token = tmp_path / "missing"
    done = node.once(live_server.url)
    assert done.returncode == 2
    assert lines(done.stderr, f"cannot read the agent token file {tmp_path / 'missing'}"), done.stderr

    node.token = issue_token(tmp_path, hostname=HOST, mode=0o644)
    done = node.once(live_server.url)
    assert done.returncode == 0
    assert lines(done.stderr, "is readable by others (mode 0644): run `chmod 600"), done.stderr


def test_backs_off_exponentially_while_the_portal_is_down(node, closed_port, running_agents):
    agent = running_agents(*node.args(closed_port, "--interval", "1", "--splay", "0", "--max-backoff", "4"))
    attempts = agent.wait_for("cannot be reached", count=4, timeout=30)
    waits = [float(line.split("next try in ")[1].split(" s")[0]) for _, line in agent.matching("next try in")]
    # interval 1 s doubled per failure, capped at 4 s; each wait jittered between half and all of it.
    assert 1 <= waits[0] <= 2 and all(2 <= w <= 4 for w in waits[1:3]), waits
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(attempts)]
    assert all(gap >= wait - 0.2 for gap, wait in zip(gaps, waits, strict=False)), (gaps, waits)
    status, took = agent.terminate()
    assert status == 0 and took < 3, agent.text()
    assert agent.matching("SIGTERM received") and agent.matching("stopped")


def test_honours_the_portals_retry_after_when_throttled(live_server, node, settings, running_agents):
    rest = dict(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"] = {**rest["DEFAULT_THROTTLE_RATES"], "node-agent": "1/min"}
    settings.REST_FRAMEWORK = rest
    node.log(xid_line(79))

    agent = running_agents(
        *node.args(live_server.url, "--interval", "1", "--splay", "0", "--max-backoff", "5")
    )
    agent.wait_for("posted the report")
    [(_, throttled)] = agent.wait_for("the portal answered 429")
    [(_, line)] = agent.wait_for("Retry-After")
    retry_after = float(line.split("Retry-After: ")[1].split(" s")[0])
    wait = float(line.split("next try in ")[1].split(" s")[0])
    assert 50 <= retry_after <= 60 and wait >= retry_after, line  # the throttle's own answer, honoured
    assert "Request was throttled" in throttled
    time.sleep(2)
    assert len(agent.matching("posted the report")) == 1 and len(agent.matching("answered 429")) == 1
    status, took = agent.terminate()
    assert status == 0 and took < 3, agent.text()  # a SIGTERM ends the long wait at once


def test_a_refused_report_is_not_retried_in_a_loop(live_server, node, tmp_path, running_agents):
    node.token = issue_token(tmp_path, hostname="gb-r01-t04")
    agent = running_agents(
        *node.args(live_server.url, "--interval", "1", "--splay", "0", "--max-backoff", "60")
    )
    agent.wait_for("with 403")
    [(_, line)] = agent.wait_for("next try in")
    assert float(line.split("next try in ")[1].split(" s")[0]) >= 50, line
    time.sleep(3)
    assert len(agent.matching("with 403")) == 1, agent.text()
    assert agent.terminate()[0] == 0


def test_sigterm_stops_a_running_check_and_it_runs_again_after_a_restart(live_server, node, running_agents):
    marker = node.folder / "check.pid"
    check = ["--check-command", f"sh -c 'echo $$ > {marker}; sleep 60'", "--check-interval", "3600"]
    agent = running_agents(*node.args(live_server.url, "--interval", "1", "--splay", "0", *check))
    agent.wait_for("running the check")
    deadline = time.monotonic() + 10
    while not (marker.exists() and marker.read_text().strip()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = int(marker.read_text())
    status, _ = agent.terminate()
    assert status == 0 and agent.matching("stopping the check"), agent.text()
    assert not _alive(pid), "the check's process outlived the agent"
    assert read_state(node.state)["last_check_started"] is None  # due again at the next start


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:  # a zombie is gone for our purpose
        return handle.read().split(") ")[1][0] != "Z"


# --- the new report keys (xids, checks, agent), as the portal's health rules take them --------------------


def test_the_portal_takes_the_xids_checks_and_agent_keys(live_server, node):
    """The contract's new keys: the portal takes them and records them (inventory.health); an older portal
    that refused them would make the agent say so and keep its XIDs."""
    node.log(xid_line(79, note="GPU has fallen off the bus."), xid_line(13, pci="0009:01:00", pid=None))
    done = node.once(live_server.url, "--check-command", "sh -c 'echo pass'", "--interval", "30")

    assert done.returncode == 0, done.stderr
    assert not lines(done.stderr, "does not take"), done.stderr
    assert lines(done.stderr, "2 XIDs, 1 check results"), done.stderr
    state = read_state(node.state)
    assert state["pending_xids"] == [] and state["pending_checks"] == []
    tray = ComputeTray.objects.get(hostname=HOST)
    assert tray.agent_version == "0.1.0" and tray.agent_interval_s == 30
    events = {e.xid: e for e in HealthEvent.objects.filter(tray=tray, kind="xid")}
    assert set(events) == {79, 13}
    assert events[79].gpu.index == 0 and events[79].message.endswith("GPU has fallen off the bus.")
    assert events[13].gpu.index == 1 and events[13].mnemonic == "ROBUST_CHANNEL_GR_EXCEPTION"
    [check] = HealthCheckResult.objects.filter(tray=tray)
    assert (check.name, check.exit_status, check.output) == ("sh -c 'echo pass'", 0, "pass\n")


# --- MIG: what the agent collects is what the portal reads ------------------------------------------------

MIG_FIXTURES = SAMPLE.parent.parent / "mig"  # tests/inventory/fixtures/mig: the parser's own fixtures


def mig_nvidia_smi(node: Node) -> None:
    """The node's nvidia-smi answers as a GB200 with GPU 0 in MIG mode: `-q -x` and the four MIG listings."""
    xml = (MIG_FIXTURES / "gb200_mig.xml").read_text()
    fixture_uuids = re.findall(r"<uuid>(GPU-[^<]+)</uuid>", xml)
    answers = {"-q -x": xml}
    for key in ("lgip", "lgipp", "lgi"):
        answers[f"mig -{key}"] = (MIG_FIXTURES / f"gb200_{key}.txt").read_text()
    answers["-L"] = (MIG_FIXTURES / "gb200_list.txt").read_text()
    script = ["#!/bin/sh", 'case "$*" in']
    for number, (arguments, text) in enumerate(answers.items()):
        for fixture_uuid, gpu in zip(fixture_uuids, node.tray.gpus.order_by("index"), strict=True):
            text = text.replace(fixture_uuid, gpu.uuid)
        text = text.replace(SAMPLE_CLUSTER, str(node.tray.rack.cluster_uuid))
        text = text.replace(
            "<cliqueId>32766</cliqueId>", f"<cliqueId>{node.tray.partition.clique_id}</cliqueId>"
        )
        answer = node.folder / f"mig-answer-{number}.txt"
        answer.write_text(text)
        script.append(f"  '{arguments}') cat '{answer}' ;;")
    script += ['  *) echo "fake nvidia-smi: no answer for $*" >&2; exit 2 ;;', "esac", ""]
    node.nvidia_smi.write_text("\n".join(script))


def test_a_node_in_mig_mode_reports_its_instances_and_the_portal_stores_them(live_server, node):
    mig_nvidia_smi(node)
    done = node.once(live_server.url)
    assert done.returncode == 0, done.stderr
    assert lines(done.stderr, "posted the report for gb-r01-t03: 200, 4 GPUs"), done.stderr
    gpu = Gpu.objects.get(tray=node.tray, index=0)
    assert gpu.mig_mode == "enabled" and gpu.mig["complete"] is True
    assert sorted(i["profile"] for i in gpu.mig["instances"]) == ["1g.23gb", "1g.23gb", "2g.47gb", "3g.93gb"]
    assert all(i["uuid"].startswith("MIG-") for i in gpu.mig["instances"])
    # The same state next time: the agent sends only its hash, and the portal takes it as unchanged.
    again = node.once(live_server.url)
    assert lines(again.stderr, "posted the report hash for gb-r01-t03: 200, unchanged"), again.stderr
