"""The agent's hash path: an unchanged listing is posted as the portal's `report_sha256` alone.

The agent never parses like the portal; it digests the parts of `nvidia-smi -q -x` the portal reads
(rackplane_agent.DIGEST_PATHS). That is safe only if whatever the digest ignores the portal ignores too:
the first test changes every element of real listings, one at a time, and checks that whenever the agent's
digest stays the same, so does the portal's parse (its canonical hash). Then the agent against the live
portal: full report, hash, 409 and the full report again, a changed listing, XIDs.
"""

from __future__ import annotations

import importlib.util
import sys
import xml.etree.ElementTree as ET

import pytest

from inventory.discovery.mig import with_mig
from inventory.discovery.nvidia_smi import ReportError, parse_xml, validate_report
from inventory.discovery.report_hash import report_hash
from inventory.models import ComputeTray
from tests.agent.conftest import (
    AGENT,
    HOST,
    SAMPLES,
    fake_nvidia_smi,
    issue_token,
    lines,
    read_state,
    xid_line,
)
from tests.agent.conftest import tray_xml as make_tray_xml

LISTINGS = ["gb200_default_partition.xml", "gb200_insufficient_resources.xml", "gb200_unhealthy.xml"]


@pytest.fixture(scope="module")
def agent_module():
    spec = importlib.util.spec_from_file_location("rackplane_agent_hash", AGENT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["rackplane_agent_hash"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["rackplane_agent_hash"]


def portal_view(xml: str) -> str:
    """The portal's canonical hash of a listing, or the refusal."""
    try:
        return report_hash("xml", validate_report(with_mig(parse_xml(xml), xml, None)), "0.1.0", 60)
    except ReportError as refusal:
        return f"refused: {refusal}"


def variants(xml: str):
    """The listing with one element changed at a time: its text (or, for an empty element, a text added)."""
    root = ET.fromstring(xml)
    elements = list(root.iter())
    for n in range(len(elements)):
        copy = ET.fromstring(xml)
        element = list(copy.iter())[n]
        if len(element):  # not a leaf: change its first attribute, if any
            if not element.attrib:
                continue
            key = next(iter(element.attrib))
            element.set(key, element.get(key) + "9")
        else:
            element.text = (
                (element.text or "").strip() + "9" if element.text and element.text.strip() else "1"
            )
        yield element.tag, ET.tostring(copy, encoding="unicode")


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("name", LISTINGS)
def test_whatever_the_digest_ignores_the_portal_ignores(agent_module, name):
    xml = (SAMPLES / name).read_text()
    digest = agent_module.listing_digest(xml, "0.1.0", 60)
    base = portal_view(xml)
    ignored = changed = 0
    for tag, variant in variants(xml):
        if agent_module.listing_digest(variant, "0.1.0", 60) == digest:
            ignored += 1
            assert portal_view(variant) == base, f"the digest ignores <{tag}> but the portal reads it"
        else:
            changed += 1
    # Real listings: most of what nvidia-smi prints (temperatures, clocks, utilization ...) is ignored,
    # and everything the portal reads counts.
    assert ignored > changed > 10, (ignored, changed)


def test_what_the_portal_reads_changes_the_digest(agent_module):
    xml = (SAMPLES / "gb200_default_partition.xml").read_text()
    digest = agent_module.listing_digest(xml, "0.1.0", 60)
    for old, new in [
        ("<cliqueId>32766</cliqueId>", "<cliqueId>1</cliqueId>"),
        ("<summary>Healthy</summary>", "<summary>Unhealthy</summary>"),
        (
            "<gpu_recovery_action>None</gpu_recovery_action>",
            "<gpu_recovery_action>Reset</gpu_recovery_action>",
        ),
    ]:
        assert old in xml
        assert agent_module.listing_digest(xml.replace(old, new, 1), "0.1.0", 60) != digest
    # The agent's version and interval are in the portal's hash too.
    assert agent_module.listing_digest(xml, "0.1.1", 60) != digest
    assert agent_module.listing_digest(xml, "0.1.0", 30) != digest
    assert agent_module.listing_digest("<not xml", "0.1.0", 60) is None


# --- against the live portal ---------------------------------------------------------------------------


class Node:
    def __init__(self, folder):
        self.folder = folder
        self.tray = ComputeTray.objects.select_related("rack", "partition").get(hostname=HOST)
        self.token = issue_token(folder, hostname=HOST)
        self.xml = make_tray_xml(self.tray)
        self.nvidia_smi = fake_nvidia_smi(folder, self.xml)
        self.kernel_log = folder / "kern.log"
        self.kernel_log.write_text("")
        self.state = folder / "state.json"

    def listing(self, xml: str) -> None:
        fake_nvidia_smi(self.folder, xml)

    def once(self, portal: str, *extra: str):
        from tests.agent.conftest import run_agent

        done = run_agent(
            "--portal", portal,
            "--host", HOST,
            "--token-file", str(self.token),
            "--nvidia-smi", str(self.nvidia_smi),
            "--kernel-log", str(self.kernel_log),
            "--state-file", str(self.state),
            "--once",
            *extra,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stderr


@pytest.fixture
def node(transactional_db, tmp_path, settings):
    from inventory.demo import seed_datacenter

    seed_datacenter(racks=1)
    settings.RACKPLANE_HEARTBEAT_BATCH_S = 0  # the live server writes each heartbeat at once
    return Node(tmp_path)


def tray() -> ComputeTray:
    return ComputeTray.objects.get(hostname=HOST)


@pytest.mark.slow(reason="runs the agent process against a live server")
@pytest.mark.django_db(transaction=True)
def test_an_unchanged_listing_is_posted_as_its_hash(live_server, node):
    said = node.once(live_server.url)
    assert lines(said, "posted the report for gb-r01-t03: 200, 4 GPUs"), said
    remembered = read_state(node.state)["report"]
    assert remembered["sha256"] == portal_view(node.xml)  # the portal's canonical hash of the listing
    seen = tray().last_report_at

    # The same listing (temperatures and clocks may differ: the portal does not read them).
    assert "<gpu_temp>" in node.xml
    node.listing(node.xml.replace("<gpu_temp>", "<gpu_temp>1", 1))
    said = node.once(live_server.url)
    assert lines(said, "posted the report hash for gb-r01-t03: 200, unchanged"), said
    assert not lines(said, "posted the report for"), said
    assert tray().last_report_at > seen
    assert read_state(node.state)["report"] == remembered

    # The portal forgot (a changed partition, a fault): 409, and the full report follows at once.
    ComputeTray.objects.filter(hostname=HOST).update(report_key="")
    said = node.once(live_server.url)
    assert lines(said, "the portal asked for the full report of gb-r01-t03"), said
    assert lines(said, "posted the report for gb-r01-t03: 200, 4 GPUs"), said
    assert tray().report_key != ""
    assert read_state(node.state)["report"]["sha256"] == remembered["sha256"]

    # A changed listing is posted in full, and reconciled.
    node.listing(node.xml.replace("<summary>Healthy</summary>", "<summary>Unhealthy</summary>", 1))
    said = node.once(live_server.url)
    assert lines(said, "posted the report for gb-r01-t03: 200, 4 GPUs"), said
    assert tray().gpus.get(index=0).health == "unhealthy"
    assert read_state(node.state).get("report", {}).get("sha256") != remembered["sha256"]


@pytest.mark.slow(reason="runs the agent process against a live server")
@pytest.mark.django_db(transaction=True)
def test_xids_always_go_with_the_full_report(live_server, node):
    node.once(live_server.url)
    with node.kernel_log.open("a") as log:
        log.write(xid_line(13, note="Graphics Exception"))
    said = node.once(live_server.url)
    assert lines(said, "posted the report for gb-r01-t03: 200, 4 GPUs, 1 XIDs"), said
    assert not lines(said, "report hash"), said


@pytest.mark.slow(reason="runs the agent process against a live server")
@pytest.mark.django_db(transaction=True)
def test_no_hash_only_always_sends_the_full_report(live_server, node):
    node.once(live_server.url)
    said = node.once(live_server.url, "--no-hash-only")
    assert lines(said, "posted the report for gb-r01-t03: 200, 4 GPUs"), said
    assert not lines(said, "report hash"), said
