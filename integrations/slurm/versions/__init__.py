"""The slurmrestd API versions Rackplane speaks, and choosing one with a slurmrestd.

slurmrestd serves its API under `/slurm/v0.0.NN/`, one path prefix per data_parser plugin it loaded
(src/plugins/data_parser/v0.0.NN in Slurm's source). A Slurm release serves a few: 24.11
v0.0.40-v0.0.42, 25.05 v0.0.40-v0.0.43, 25.11 v0.0.41-v0.0.44, 26.05 v0.0.42-v0.0.45 (v0.0.42 deprecated),
26.11 v0.0.43-v0.0.46 (24.11 and 26.05 measured on the testbeds; the others from Slurm's RELEASE_NOTES and
openapi release notes). Which ones a slurmrestd serves is in its OpenAPI document, `GET /openapi/v3`: every
path it routes, `/slurm/v0.0.45/job/submit` and so on (`served_versions`).

Rackplane uses the newest version both sides know (`choose`). One module per version holds what differs in
that version's data parser for what Rackplane sends and reads (job submit, job state, cancel and signal,
nodes, ping): v0_0_42 is the whole of it, each later one only its changes (`Dialect`, built from the one
before with `dataclasses.replace`). The requests and answers themselves stay one code path (rest.py,
jobs.py); a dialect only answers the few questions where versions differ.

The facts come from Slurm's source (github.com/SchedMD/slurm at 26.11's development branch): the OpenAPI
documents each data parser generates (testsuite/python/data/openapi_specs/openapi_spec_v4N.json), the
parsers (src/plugins/data_parser/v0.0.4N/parsers.c) and the CHANGELOG. Between v0.0.42 and v0.0.45 nothing
Rackplane sends changed: `v0.0.4N_job_desc_msg` keeps every field `submit_payload` fills with the same
type, the submit answer keeps `job_id`, DELETE /job/{id} keeps `signal` and `flags=FULL_JOB` and answers
`status[].error.code` the same, and a node keeps `name`. What changed is read-side only (see each module).
tests/integrations/slurm/test_versions.py checks every module against trimmed copies of those documents.

The Slurm target's part of the versions page (integrations.versions) is here too: the facts its check and
the job backend keep (`slurm_rest`, the version in use, and `slurm_rest_served`), what Rackplane speaks to
it (`uses`) and the removals ahead that can touch it (`REMOVALS`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import date
from typing import Any

from integrations.slurm.versions.dialect import Dialect
from integrations.slurm.versions.v0_0_42 import DIALECT as V0_0_42
from integrations.slurm.versions.v0_0_43 import DIALECT as V0_0_43
from integrations.slurm.versions.v0_0_44 import DIALECT as V0_0_44
from integrations.slurm.versions.v0_0_45 import DIALECT as V0_0_45
from integrations.versions import Facts, Removal

__all__ = [
    "KNOWN",
    "REMOVALS",
    "VERSION_FACTS",
    "Dialect",
    "choose",
    "known_range",
    "served_versions",
    "uses",
    "version_key",
]

# Oldest first.
KNOWN: dict[str, Dialect] = {d.version: d for d in (V0_0_42, V0_0_43, V0_0_44, V0_0_45)}

VERSION_RE = re.compile(r"^v[0-9]+\.[0-9]+\.[0-9]+$")
_PATH_RE = re.compile(r"^/slurm/(v[0-9]+\.[0-9]+\.[0-9]+)/")


def version_key(version: str) -> tuple[int, ...]:
    """ "v0.0.43" -> (0, 0, 43), for ordering (a string sort would put v0.0.100 before v0.0.43)."""
    return tuple(int(part) for part in version.removeprefix("v").split("."))


def served_versions(openapi: Any) -> list[str]:
    """The /slurm/ API versions an OpenAPI document routes (slurmrestd's `GET /openapi/v3`), oldest first.

    The paths are what counts: slurmrestd answers only those. (Slurm 25.05 and later also list their
    data_parser plugins under `info.x-slurm.data_parsers`, but 24.11 does not, and a plugin loaded without
    openapi/slurmctld routes nothing under /slurm/.)"""
    paths = openapi.get("paths") if isinstance(openapi, Mapping) else None
    found = {m.group(1) for path in paths or () if isinstance(path, str) and (m := _PATH_RE.match(path))}
    return sorted(found, key=version_key)


def choose(served: Iterable[str]) -> Dialect | None:
    """The newest version both Rackplane and the server know, or None when they share none."""
    common = [v for v in served if v in KNOWN]
    return KNOWN[max(common, key=version_key)] if common else None


def known_range() -> str:
    """ "v0.0.42-v0.0.45": the versions Rackplane speaks, for messages and the docs."""
    versions = list(KNOWN)
    return versions[0] if len(versions) == 1 else f"{versions[0]}-{versions[-1]}"


# --- the versions page (integrations.versions) ----------------------------------------------------------

VERSION_FACTS = (
    ("slurm_version", "Slurm"),
    ("slurm_rest", "slurmrestd API in use"),
    ("slurm_rest_served", "slurmrestd serves"),
)


def uses(facts: Facts, settings: Facts) -> str:
    rest = facts.get("slurm_rest") or "(its version is read at Test connection or the first job)"
    jobs = f"slurmrestd {rest}" if settings.get("rest_url") else "no jobs (no slurmrestd set)"
    topology = (
        "topology.yaml (topology/block and the fabric's topology/tree)"
        if settings.get("topology_format") == "yaml"
        else "topology.conf (topology/block)"
    )
    return f"{jobs}; slurm.conf include files, scontrol reconfigure, {topology}"


REMOVALS = (
    Removal(
        key="slurm-rest-v0.0.42",
        what="slurmrestd API v0.0.42 (/slurm/v0.0.42/)",
        deprecated_in="Slurm 26.05",
        removed_in="Slurm 26.11",
        due=date(2026, 11, 1),  # Slurm's November release
        touches=lambda facts: facts.get("slurm_rest") == "v0.0.42",
        # Rackplane reads which versions slurmrestd serves and takes the newest it knows: after the upgrade
        # it speaks a newer one without a change here.
        handled=lambda facts: True,
        what_to_do=(
            "nothing on Rackplane's side: it moves to the newest version slurmrestd serves after the "
            "upgrade; press Test connection once Slurm is upgraded to see the version it took"
        ),
        source="Slurm 26.05 RELEASE_NOTES: v0.0.42 deprecated, to be removed in 26.11",
    ),
)
