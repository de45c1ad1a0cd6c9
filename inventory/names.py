"""The inventory's names as every consumer takes them, checked at save. Pure: no Django import.

A rack's name, a tray's hostname, an NVLink partition's name and its service tier reach slurm.conf,
topology.conf, Kubernetes labels, node names and Kueue objects (integrations.state). The renderers refuse a
name their consumer cannot take, but at render time one bad row stops the push of every target; so the
models (validators and named check constraints), the partition wizard and the node-report API refuse it
when it is typed, with these rules and messages.

* **Rack name**: a DNS-1123 label (1-63 lower-case letters, digits and '-', starting and ending with a letter
  or digit). It is the `rackplane.io/rack` label value (at most 63 characters, case-sensitive), part of the
  Slurm block names (`<rack short name><partition>`, integrations.state.block_name) and, lower-cased with its
  partitions' names, of the Kueue ResourceFlavor names (DNS-1123 subdomains): lower case keeps `R1` and `r1`
  from becoming one flavor.
* **Tray hostname**: a DNS-1123 subdomain of at most 63 characters (dot-separated labels as above). It is the
  Kubernetes Node's name (a DNS-1123 subdomain) and its `kubernetes.io/hostname` label value (63 at most),
  and Slurm's NodeName (letters, digits, '.', '-'; no ',', '[', ']' or spaces, which are hostlist syntax).
* **NVLink partition name**: a DNS-1123 label of at most 31 characters (the wizard's rule,
  now also ending with a letter or digit: `<rack>.<partition>` is a label value and a flavor name).
* **Service tier** (the Slurm partition of an NVLink partition that is dedicated to no department): empty
  (the shared partition `gpu`), `gpu`, or `gpu_<name>` with `<name>` 1-30 lower-case letters, digits and
  single hyphens. The `_` is the distinct form: a department's slug never holds one (tenancy.naming), and a
  department's dedicated NVLink partitions become the Slurm partition named after its slug, so no service
  tier can ever name the same Slurm partition as a department (`gpu` itself is a reserved slug). A
  partition dedicated to a department is always served by the department's Slurm partition
  (integrations.state.partition_tier), so each Slurm partition has one owner: everyone (`gpu`, `gpu_*`) or
  one department (its slug).
"""

from __future__ import annotations

import re

from core.sentences import gettext_noop, say

SHARED_TIER = "gpu"  # the shared Slurm partition: every tray in no dedicated NVLink partition and no tier
TIER_SEPARATOR = "_"  # never in a department slug (tenancy.naming.SLUG_PATTERN)
TIER_PREFIX = SHARED_TIER + TIER_SEPARATOR
TIER_NAME_MAX = 30  # the part after `gpu_`

RACK_NAME_MAX = 63  # a Kubernetes label value
HOSTNAME_MAX = 63  # the kubernetes.io/hostname label value
PARTITION_NAME_MAX = 31

# \A and \Z (not ^ and $, which let a trailing newline through); PostgreSQL reads them the same way, so the
# models' check constraints use these very patterns.
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
DNS_LABEL_PATTERN = rf"\A{_LABEL}\Z"
HOSTNAME_PATTERN = rf"\A{_LABEL}(?:\.{_LABEL})*\Z"
TIER_PATTERN = rf"\A{SHARED_TIER}(?:{TIER_SEPARATOR}[a-z0-9](?:-?[a-z0-9])*)?\Z"
_DNS_LABEL = re.compile(DNS_LABEL_PATTERN)
_HOSTNAME = re.compile(HOSTNAME_PATTERN)
_TIER = re.compile(TIER_PATTERN)

# Why a name is refused: templates (core.sentences), written in English (the API, the node-report API, the
# migration's refusal), shown in the viewer's language by the portal's forms (inventory.validators) and the
# wizard's findings. `why` is what the name is used for (a template of its own).
NAME_REQUIRED = gettext_noop("a name is required")
HOSTNAME_REQUIRED = gettext_noop("a hostname is required")
TOO_LONG = gettext_noop("at most %(limit)s characters (this one has %(length)s): %(why)s")
LOWER_CASE = gettext_noop("use lower case: %(why)s")
LABEL_ONLY = gettext_noop(
    "use only lower-case letters (a-z), digits and '-', starting and ending with a letter or digit: %(why)s"
)
HOSTNAME_ONLY = gettext_noop(
    "use only lower-case letters (a-z), digits and '-', starting and ending with a letter or digit, with '.' "
    "between such parts: %(why)s"
)
RACK_NAME_USE = gettext_noop("it is a Kubernetes label value and part of Slurm block names")
PARTITION_NAME_USE = gettext_noop(
    "with its rack's name it is a Kubernetes label value and a Slurm block name"
)
HOSTNAME_USE = gettext_noop("it is the Kubernetes node's name and label value and the Slurm NodeName")
TIER_NOT_TEXT = gettext_noop("a service tier is text")
TIER_FORM = gettext_noop(
    "a service tier is '%(shared)s' or '%(prefix)s<name>' (e.g. '%(example)s', <name> being up to "
    "%(limit)s lower-case letters, digits and single hyphens), or empty for the shared partition: names "
    "without '%(separator)s' are departments' Slurm partitions"
)


def _label_error(name: object, limit: int, why: str) -> str | None:
    if not isinstance(name, str) or not name:
        return NAME_REQUIRED
    if len(name) > limit:
        return say(TOO_LONG, limit=limit, length=len(name), why=why)
    if _DNS_LABEL.match(name) is None:
        return say(LOWER_CASE if name != name.lower() else LABEL_ONLY, why=why)
    return None


def rack_name_error(name: object) -> str | None:
    """Why `name` cannot be a rack's name; None when it can."""
    return _label_error(name, RACK_NAME_MAX, RACK_NAME_USE)


def partition_name_error(name: object) -> str | None:
    """Why `name` cannot be an NVLink partition's name; None when it can."""
    return _label_error(name, PARTITION_NAME_MAX, PARTITION_NAME_USE)


def hostname_error(hostname: object) -> str | None:
    """Why `hostname` cannot be a compute tray's hostname; None when it can."""
    if not isinstance(hostname, str) or not hostname:
        return HOSTNAME_REQUIRED
    if len(hostname) > HOSTNAME_MAX:
        return say(TOO_LONG, limit=HOSTNAME_MAX, length=len(hostname), why=HOSTNAME_USE)
    if _HOSTNAME.match(hostname) is None:
        return say(LOWER_CASE if hostname != hostname.lower() else HOSTNAME_ONLY, why=HOSTNAME_USE)
    return None


def service_tier_error(tier: object) -> str | None:
    """Why `tier` cannot be an NVLink partition's service tier; None when it can (empty: the shared one)."""
    if tier == "":
        return None
    if not isinstance(tier, str):
        return TIER_NOT_TEXT
    if _TIER.match(tier) is None or len(tier) > len(TIER_PREFIX) + TIER_NAME_MAX:
        return say(
            TIER_FORM,
            shared=SHARED_TIER,
            prefix=TIER_PREFIX,
            example=f"{TIER_PREFIX}interactive",
            limit=TIER_NAME_MAX,
            separator=TIER_SEPARATOR,
        )
    return None
