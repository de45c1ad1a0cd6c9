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

_LABEL_WORDS = "lower-case letters (a-z), digits and '-', starting and ending with a letter or digit"


def _label_error(name: object, limit: int, why: str) -> str | None:
    if not isinstance(name, str) or not name:
        return "a name is required"
    if len(name) > limit:
        return f"at most {limit} characters (this one has {len(name)}): {why}"
    if _DNS_LABEL.match(name) is None:
        if name != name.lower():
            return f"use lower case: {why}"
        return f"use only {_LABEL_WORDS}: {why}"
    return None


def rack_name_error(name: object) -> str | None:
    """Why `name` cannot be a rack's name; None when it can."""
    return _label_error(name, RACK_NAME_MAX, "it is a Kubernetes label value and part of Slurm block names")


def partition_name_error(name: object) -> str | None:
    """Why `name` cannot be an NVLink partition's name; None when it can."""
    return _label_error(
        name, PARTITION_NAME_MAX, "with its rack's name it is a Kubernetes label value and a Slurm block name"
    )


def hostname_error(hostname: object) -> str | None:
    """Why `hostname` cannot be a compute tray's hostname; None when it can."""
    why = "it is the Kubernetes node's name and label value and the Slurm NodeName"
    if not isinstance(hostname, str) or not hostname:
        return "a hostname is required"
    if len(hostname) > HOSTNAME_MAX:
        return f"at most {HOSTNAME_MAX} characters (this one has {len(hostname)}): {why}"
    if _HOSTNAME.match(hostname) is None:
        if hostname != hostname.lower():
            return f"use lower case: {why}"
        return f"use only {_LABEL_WORDS}, with '.' between such parts: {why}"
    return None


def service_tier_error(tier: object) -> str | None:
    """Why `tier` cannot be an NVLink partition's service tier; None when it can (empty: the shared one)."""
    if tier == "":
        return None
    if not isinstance(tier, str):
        return "a service tier is text"
    if _TIER.match(tier) is None or len(tier) > len(TIER_PREFIX) + TIER_NAME_MAX:
        return (
            f"a service tier is '{SHARED_TIER}' or '{TIER_PREFIX}<name>' (e.g. '{TIER_PREFIX}interactive'; "
            f"<name>: up to {TIER_NAME_MAX} lower-case letters, digits and single hyphens), or empty for the "
            f"shared partition: names without '{TIER_SEPARATOR}' are departments' Slurm partitions"
        )
    return None
