"""An NMX-M fabric target finds the path its server serves at Test connection (integrations.push_history,
FabricAdapter.check), keeps it on the target (ConfigTarget.facts `nmx_api`), and a push then goes straight
to it; NetQ 5.2's `/v1` and NMX-M's `/nmx/v1`, against the stand-in (tests/integrations/nmx_standin.py)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from integrations import pushes
from integrations.models import ConfigTarget
from integrations.registry import clean_settings
from tests.integrations.fabric.test_fabric import RACK, TRAYS, gpu_uuid, rack_gpus
from tests.integrations.nmx_standin import NmxStandin

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["/v1", "/nmx/v1"])
def standin(request):
    # Operations complete at the first poll: the adapter polls a second after each write.
    server = NmxStandin(prefix=request.param, token="cnctdXNlcjpzZWNyZXQ=", operation_steps=("completed",))
    server.add_domain(RACK, rack_gpus(RACK))
    with server:
        yield server


def nmx_target(server: NmxStandin, token: str = "cnctdXNlcjpzZWNyZXQ=") -> ConfigTarget:
    settings = {"kind": "nmx", "base_url": server.url, "token": token}
    return ConfigTarget.objects.create(
        name="nvlink", kind="fabric", settings=clean_settings("fabric", settings)
    )


def two_partitions() -> dict:
    """A push payload (Kind.payload: rendered.fabric_racks()) carving the rack 2x9."""
    partitions = [
        {
            "name": f"p{n}",
            "partition_id": n,
            "gpus": [(gpu_uuid(RACK, s, i), s, i) for s in slots for i in range(4)],
        }
        for n, slots in ((1, range(1, 10)), (2, range(10, TRAYS + 1)))
    ]
    return {"racks": [{"rack": "gb-r01", "domain": RACK, "partitions": partitions}]}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_test_connection_finds_the_path_keeps_it_and_a_push_goes_straight_there(
    standin, client_as, platform_admin
):
    target = nmx_target(standin)
    response = client_as(platform_admin).post(
        reverse("integrations:target-test", args=[target.pk]), HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    release = "NetQ 5.2 or later" if standin.prefix == "/v1" else "NMX-M or NetQ 5.0"
    assert (
        'data-ok="true"' in html
        and f"NMX-M answers at {standin.url}{standin.prefix} (the path of {release})" in html
    )
    assert "72 GPUs and 1 partitions visible with this token" in html
    assert standin.writes == []
    target.refresh_from_db()
    assert target.facts["nmx_api"] == standin.prefix and target.facts["fabric_manager"] == "NMX-M"

    standin.requests.clear()
    adapter = pushes.adapter_for(target)
    lines: list[str] = []
    assert adapter.apply(two_partitions(), lambda *text: lines.extend(text), None).startswith(
        "1 rack(s) changed"
    )
    assert all(r.path.startswith(f"{standin.prefix}/") for r in standin.requests)  # no probe: remembered
    held = standin.partitions(RACK)
    assert held["p1"][1] == sorted(
        uuid for uuid, _, _ in two_partitions()["racks"][0]["partitions"][0]["gpus"]
    )
    assert len(held["p2"][1]) == 36 and held["Default Partition"][1] == []
    assert any("p1" in line or "gb-r01" in line for line in lines)


def test_wrong_credentials_fail_the_test_in_words_and_remember_nothing(standin, client_as, platform_admin):
    target = nmx_target(standin, token="d3Jvbmc6d3Jvbmc=")
    html = (
        client_as(platform_admin)
        .post(reverse("integrations:target-test", args=[target.pk]), HTTP_HX_REQUEST="true")
        .content.decode()
    )
    assert 'data-ok="false"' in html and "Connection failed." in html and "HTTP 401" in html
    target.refresh_from_db()
    assert "nmx_api" not in (target.facts or {})
