"""The fabric target's versions (integrations.versions): the path NMX-M answers under (its check and pushes
keep it), what Rackplane speaks to it, and the removals ahead that can touch it."""

from integrations.versions import Facts, Removal

VERSION_FACTS = (("fabric_manager", "Fabric manager"), ("nmx_api", "NMX-M path"))


def uses(facts: Facts, settings: Facts) -> str:
    if settings.get("kind") != "nmx":
        return "the simulated fabric (in this process)"
    if facts.get("nmx_api"):
        return f"NMX-M partitions API under {facts['nmx_api']}"
    return "NMX-M partitions API (its path is found at Test connection)"


REMOVALS = (
    Removal(
        key="nmx-v1-path",
        what="NMX-M partition paths under /nmx/v1",
        deprecated_in="NetQ 5.2 (NMX-M inside NetQ writes them under /v1)",
        removed_in="not announced",
        due=None,
        touches=lambda facts: facts.get("nmx_api") == "/nmx/v1",
        # Test connection and pushes find the path the server answers under, and look again on a 404.
        handled=lambda facts: True,
        what_to_do="nothing: Rackplane finds /v1 by itself once the fabric manager serves it",
        source="NetQ 5.0 and 5.2 NVLink documentation, Manage Partitions",
    ),
)
