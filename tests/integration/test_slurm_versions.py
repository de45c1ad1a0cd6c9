"""The slurmrestd API version, chosen with the real slurmrestd of the testbed (scripts/slurm-testbed.sh):
Slurm 24.11 (trixie, the default) serves v0.0.40-v0.0.42 and Rackplane takes v0.0.42; Slurm 26.05 (sid,
`make test-slurm-next`) serves v0.0.42-v0.0.45 and Rackplane takes v0.0.45."""

from __future__ import annotations

import dataclasses
import json
import os
import urllib.request

import pytest

from integrations.jobs import API_VERSION_SETTING
from integrations.slurm import versions
from integrations.slurm.jobs import SlurmJobBackend

pytestmark = pytest.mark.integration

REST_USER = os.environ.get("RACKPLANE_SLURM_REST_USER", "slurm")
# What each Slurm release the testbeds run serves (measured), and what Rackplane takes of it.
SERVED = {
    "24.11": (["v0.0.40", "v0.0.41", "v0.0.42"], "v0.0.42"),
    "26.05": (["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"], "v0.0.45"),
}


def backend(**kwargs) -> SlurmJobBackend:
    return SlurmJobBackend(
        os.environ["RACKPLANE_SLURMRESTD_URL"],
        REST_USER,
        jwt_key_file=os.environ["RACKPLANE_SLURM_JWT_KEY"],
        timeout=40,
        **kwargs,
    )


def slurm_release(client: SlurmJobBackend) -> str:
    """ "24.11" from the OpenAPI document's info.version ("Slurm-24.11.5&openapi/..." or "Slurm-26.05.5")."""
    request = urllib.request.Request(
        os.environ["RACKPLANE_SLURMRESTD_URL"] + "/openapi/v3",
        headers={"X-SLURM-USER-NAME": REST_USER, "X-SLURM-USER-TOKEN": client._current_token()},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        version = json.load(answer)["info"]["version"]
    return ".".join(version.removeprefix("Slurm-").split("&")[0].split(".")[:2])


def test_the_newest_version_this_slurmrestd_serves_is_chosen_and_remembered(slurm_testbed):
    chosen: list[tuple] = []
    client = backend(on_api_version=lambda *a: chosen.append(a))
    dialect = client.negotiate()
    assert dialect == versions.choose(client.served)
    release = slurm_release(client)
    if release in SERVED:  # a testbed of another release: only the rule above holds
        assert (client.served, dialect.version) == SERVED[release]
    assert chosen == [(dialect.version, client.served)]
    assert client.ping()  # and it speaks it
    assert client.jobs(None) is not None


def test_a_version_slurmrestd_does_not_serve_is_replaced_at_its_first_404(slurm_testbed):
    """As after an upgrade of slurmrestd: the remembered version's paths answer the router's 404."""
    chosen: list[tuple] = []
    client = backend(api_version="v0.0.42", on_api_version=lambda *a: chosen.append(a))
    gone = dataclasses.replace(versions.KNOWN["v0.0.42"], version="v0.0.39")  # served by no testbed
    client._dialect, client._remembered = gone, gone.version
    nodes = client.missing_nodes(slurm_testbed.hostnames())
    assert nodes == []
    assert chosen == [(client.api_version, client.served)]
    assert client.api_version == versions.choose(client.served).version


@pytest.mark.django_db
def test_test_connection_chooses_the_version_and_the_target_remembers_it(testbed_target):
    from integrations.push_history import test_connection
    from integrations.registry import clean_settings

    testbed_target.settings = clean_settings(
        "slurm",
        {
            **testbed_target.settings,
            "rest_url": os.environ["RACKPLANE_SLURMRESTD_URL"],
            "rest_user": REST_USER,
            "jwt_key_file": os.environ["RACKPLANE_SLURM_JWT_KEY"],
        },
    )
    testbed_target.api_version = "v0.0.43"  # remembered from another slurmrestd: asked again
    testbed_target.save()
    result = test_connection(testbed_target)
    assert result.ok, (result.summary, result.details)
    testbed_target.refresh_from_db()
    client = backend()
    expected = client.negotiate().version
    assert testbed_target.api_version == expected
    # The versions page's facts (integrations.versions): the version in use and what slurmrestd serves.
    assert testbed_target.facts["slurm_rest"] == expected
    assert testbed_target.facts["slurm_rest_served"] == client.served
    assert any(f"Rackplane speaks {expected}" in line for line in result.details), result.details
    # The job backend dispatch builds speaks the remembered version without asking again.
    from integrations.dispatch import backend_for

    job_backend, _label, values = backend_for("slurm")
    assert values[API_VERSION_SETTING] == expected
    assert job_backend._dialect is not None and job_backend.api_version == expected
