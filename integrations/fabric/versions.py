"""The fabric target's versions (integrations.versions): the path NMX-M answers under (its check and pushes
keep it), what Rackplane speaks to it, and the removals ahead that can touch it."""

from django.utils.translation import gettext, gettext_noop

from integrations.versions import Facts, Removal

VERSION_FACTS = (("fabric_manager", gettext_noop("Fabric manager")), ("nmx_api", gettext_noop("NMX-M path")))


def uses(facts: Facts, settings: Facts) -> str:
    if settings.get("kind") != "nmx":
        return gettext("the simulated fabric (in this process)")
    if facts.get("nmx_api"):
        return gettext("NMX-M partitions API under %(path)s") % {"path": facts["nmx_api"]}
    return gettext("NMX-M partitions API (its path is found at Test connection)")


REMOVALS = (
    Removal(
        key="nmx-v1-path",
        what=gettext_noop("NMX-M partition paths under /nmx/v1"),
        deprecated_in=gettext_noop("NetQ 5.2 (NMX-M inside NetQ writes them under /v1)"),
        removed_in=gettext_noop("not announced"),
        due=None,
        touches=lambda facts: facts.get("nmx_api") == "/nmx/v1",
        # Test connection and pushes find the path the server answers under, and look again on a 404.
        handled=lambda facts: True,
        what_to_do=gettext_noop("nothing: Rackplane finds /v1 by itself once the fabric manager serves it"),
        source="NetQ 5.0 and 5.2 NVLink documentation, Manage Partitions",
    ),
)
