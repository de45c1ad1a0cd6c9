"""The API answers what its OpenAPI document says, checked by schemathesis.

Schemathesis's own runner (`st run`, every phase and every check) is pointed at the portal served by
pytest-django's live server, once with a member's token and once with a platform admin's, and must find no
failure and no server error. Bounded (a few examples per operation, a fixed seed) so it fits in `make test`;
`make fuzz` runs the same test with more examples and the coverage phase, and prints each run's summary
(cases generated, failures). Its last result is in docs/api/index.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.access import Role
from tests import factories

pytestmark = [
    pytest.mark.slow(reason="generated requests for every API operation"),
    pytest.mark.django_db(transaction=True),
]

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "3"))
SEED = int(os.environ.get("FUZZ_SEED", "12"))
PHASES = os.environ.get("FUZZ_PHASES", "examples,fuzzing")
ST = Path(sys.executable).with_name("st")
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.fixture
def people(demo_inventory):
    department = factories.make_department("Research", guaranteed_gpus=8)
    member = factories.make_member("fuzz-member", department)
    factories.make_member("fuzz-lead", department, role=Role.LEAD)
    admin = factories.make_user("fuzz-admin", staff=True)
    return {"member": member, "admin": admin, "agent": factories.make_node_agent()}


@pytest.fixture
def unthrottled(settings):
    """Schemathesis sends thousands of requests a minute: the API's rates are not what is tested here."""
    rest = dict(settings.REST_FRAMEWORK)
    rates = {scope: "1000000/minute" for scope in rest.get("DEFAULT_THROTTLE_RATES", {})}
    if rates:
        rest["DEFAULT_THROTTLE_RATES"] = rates
    settings.REST_FRAMEWORK = rest


def authorization(user) -> str:
    return factories.token_client(user)._credentials["HTTP_AUTHORIZATION"]


def run_schemathesis(url: str, header: str, report: Path) -> subprocess.CompletedProcess:
    command = [
        str(ST),
        "--config-file",
        str(CONFIG),
        "run",
        f"{url}/api/schema/",
        "--header",
        f"Authorization: {header}",
        "--checks",
        "all",
        "--phases",
        PHASES,
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        str(SEED),
        "--generation-deterministic",
        "--workers",
        "1",
        "--no-color",
        "--report",
        "json",
        "--report-json-path",
        str(report),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)


# A member and a platform admin, and the node agent's fleet token for the discovery and telemetry
# endpoints the other two may not use.
@pytest.mark.parametrize("persona", ["member", "admin", "agent"])
def test_the_api_answers_what_its_schema_says(live_server, people, unthrottled, persona, tmp_path):
    report = tmp_path / "report.json"
    result = run_schemathesis(live_server.url, authorization(people[persona]), report)
    if os.environ.get("FUZZ_REPORT"):
        summary = result.stdout[result.stdout.rfind("SUMMARY") :]
        print(f"\n== schemathesis with the {persona}'s token ==\n{summary}")
    if os.environ.get("FUZZ_LOG"):
        Path(os.environ["FUZZ_LOG"]).with_suffix(f".{persona}.txt").write_text(result.stdout + result.stderr)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    # It ran: every operation tested (the token rotation left out), cases generated for each.
    tested = re.search(r"Tested: (\d+)", result.stdout)
    generated = re.search(r"(\d+) generated", result.stdout)
    assert tested and int(tested.group(1)) >= 33, result.stdout[-3000:]
    assert generated and int(generated.group(1)) >= 2 * int(tested.group(1)), result.stdout[-3000:]
