"""The Slurm target's versions (integrations.versions): the facts its check and pushes keep, what Rackplane
speaks to it, and the removals ahead that can touch it."""

from datetime import date

from integrations.versions import Facts, Removal

VERSION_FACTS = (
    ("slurm_version", "Slurm"),
    ("slurm_rest", "slurmrestd API in use"),
    ("slurm_rest_served", "slurmrestd serves"),
)


def uses(facts: Facts, settings: Facts) -> str:
    rest = facts.get("slurm_rest") or "(its version is read at Test connection or the first job)"
    jobs = f"slurmrestd {rest}" if settings.get("rest_url") else "no jobs (no slurmrestd set)"
    return f"{jobs}; slurm.conf include files, scontrol reconfigure, topology/block"


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
