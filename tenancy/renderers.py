"""Configuration renderers for department (tenant) isolation: state in, text or plain objects out.

Pure Python, no Django import: the web app, the config-push tasks and the simulator all call these with
`TenantSpec` values built from the database. Every renderer is deterministic (same tenants in any order ->
byte-identical output) so that a `ConfigPush` hash only changes when the configuration does.

This module holds what is not any one outside system's: the tenant model the renderers read (`TenantSpec`,
`ProjectSpec`, their validation and the cross-department invariants), the names derived from it, and the
files of the fabric and storage:
- OpenSM `partitions.conf` (one InfiniBand partition key per department),
- NFS `/etc/exports` lines (one export per department, restricted to the department's network).
The Kubernetes objects of a tenant (Namespace, ResourceQuota, NetworkPolicy, Kueue queues and cohorts, the
NFS PersistentVolume and its claim) and `to_yaml` live with the Kubernetes integration:
integrations.kubernetes.tenants (integrations import tenancy, never the reverse).

Projects under departments (`ProjectSpec`): each project is a share of its department's GPUs with
a namespace `<department>--<project>` (tenancy.naming); a department without projects renders exactly as
before.

Formats follow OpenSM's partition-config.txt and exports(5); choices they leave open are documented where
they are made (search for "Decision:").
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tenancy import naming

# --- validation helpers -------------------------------------------------------------------------------

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_PORT_GUID = re.compile(r"^0x[0-9a-fA-F]{16}\Z")
# Export paths are written unquoted into /etc/exports and into PV specs: allow only characters that need
# no quoting or octal escaping in exports(5) (no whitespace, '#', quotes, parentheses, backslashes), see
# `export_path_problem`.
_EXPORT_PATH_CHAR = re.compile(r"[A-Za-z0-9._/-]")
EXPORT_PATH_MAX = 255  # the model field's max_length; PATH_MAX is far larger, exportfs lines are not

PKEY_MIN, PKEY_MAX = 0x0001, 0x7FFE  # 0x7fff is the default partition; the top bit is the membership bit.
DEFAULT_PKEY = 0x7FFF
VLAN_MIN, VLAN_MAX = 1, 4094
VNI_MIN, VNI_MAX = 1, 16_777_215


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_dns_label(value: str, what: str) -> None:
    if not isinstance(value, str) or len(value) > 63 or not _DNS1123_LABEL.match(value):
        raise ValueError(
            f"{what} {value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )


def _check_int_range(value: Any, lo: int, hi: int | None, what: str) -> None:
    if not _is_int(value) or value < lo or (hi is not None and value > hi):
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{what} must be an integer in {bound}, got {value!r}")


# What exports(5) and exportfs give a meaning to, named in the refusal so the person sees why.
_EXPORTS_SPECIAL = {
    "*": "a client wildcard in exports",
    "?": "a client wildcard in exports",
    "(": "the start of an export's options",
    ")": "the end of an export's options",
    ",": "the option separator in exports",
    "#": "the start of a comment in exports",
    '"': "a quote in exports",
    "\\": "an octal escape in exports",
    "@": "a netgroup in exports",
    ":": "a separator of NFS server and path",
}


def _describe_char(char: str) -> str:
    if char in "\n\r":
        return "a line break"
    if char.isspace():
        return f"whitespace (U+{ord(char):04X})"
    if char in _EXPORTS_SPECIAL:
        return f"{char!r} ({_EXPORTS_SPECIAL[char]})"
    name = unicodedata.name(char, "a control character")
    return f"{char!r} (U+{ord(char):04X} {name})" if char.isprintable() else f"U+{ord(char):04X} ({name})"


def export_path_problem(path: Any, root: str | None = None) -> str:
    """Why `path` cannot be a department's export path ("" when it can): it is written unquoted as the first
    token of an /etc/exports line and as a PersistentVolume's `nfs.path`.

    It must be absolute and in normal form (posixpath.normpath gives it back: no '.' or '..' component, no
    '//', no trailing '/'), at most EXPORT_PATH_MAX characters, of letters, digits, '.', '_' and '-' between
    '/' only (no whitespace or line break, which would split the line; none of exports(5)'s '*', '(', ')',
    ',', '#', '"', '\\'), and, when `root` is given, strictly inside `root` (never the root itself, which
    holds every department's data). The sentence reads after the path's name: "export path ... <problem>".
    """
    if not isinstance(path, str) or not path:
        return "is empty"
    if len(path) > EXPORT_PATH_MAX:
        return f"is {len(path)} characters long: at most {EXPORT_PATH_MAX}"
    for char in path:
        if not _EXPORT_PATH_CHAR.fullmatch(char):
            return (
                f"contains {_describe_char(char)}: use only letters, digits, '.', '_' and '-' between the "
                "'/' of an absolute path"
            )
    if not path.startswith("/"):
        return "is not absolute: it must start with '/'"
    if path == "/":
        return "is the root directory: every file of the server would be exported"
    if "//" in path:
        return "contains '//': write one '/' between directories"
    if path.endswith("/"):
        return "ends with '/': leave the trailing '/' out"
    if any(part in (".", "..") for part in path.split("/")):
        return "has a '.' or '..' component: write the directory it means"
    if posixpath.normpath(path) != path:  # pragma: no cover - the rules above leave nothing for it
        return f"is not in normal form ({posixpath.normpath(path)})"
    if root is not None and not is_inside(path, root):
        return f"is not inside the export root {root}: departments' exports live under it"
    return ""


def is_inside(path: str, directory: str) -> bool:
    """Whether `path` lies strictly below `directory` (both absolute, normal form): '/a/bc' is not inside
    '/a/b'."""
    return path != directory and path.startswith(directory.rstrip("/") + "/")


def _normalise_guid(guid: str, slug: str) -> str:
    if not isinstance(guid, str) or not _PORT_GUID.match(guid):
        raise ValueError(
            f"department {slug!r}: port GUID {guid!r} is not '0x' followed by 16 hexadecimal digits"
        )
    if int(guid, 16) == 0:
        # OpenSM rejects a zero GUID ("bad PortGUID") and discards the rest of the file.
        raise ValueError(f"department {slug!r}: port GUID {guid!r} is zero")
    return guid.lower()


@dataclass(frozen=True)
class ProjectSpec:
    """A project of a department (tenancy.Project): its share of the department's GPUs."""

    slug: str  # with the department's slug, the namespace `<department>--<project>` (tenancy.naming)
    name: str
    guaranteed_gpus: int
    limit_gpus: int | None = None
    weight: str = "1"  # over-quota weight, as a decimal string (Kueue's fairSharing.weight)

    def __post_init__(self) -> None:
        if (why := naming.slug_error(self.slug, department=False)) is not None:
            raise ValueError(f"project slug {self.slug!r}: {why}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"project {self.slug!r}: name must be a non-empty string")
        _check_int_range(self.guaranteed_gpus, 0, None, f"project {self.slug!r}: guaranteed_gpus")
        if self.limit_gpus is not None:
            _check_int_range(
                self.limit_gpus, self.guaranteed_gpus, None, f"project {self.slug!r}: limit_gpus"
            )
        if not isinstance(self.weight, str) or not re.fullmatch(r"[0-9]+(\.[0-9]+)?", self.weight):
            raise ValueError(f"project {self.slug!r}: weight {self.weight!r} is not a decimal number >= 0")


@dataclass(frozen=True)
class TenantSpec:
    """What the renderers need to know about one department. Validated on construction.

    GUIDs are normalised to lower case and de-duplicated (a tray can be listed both because the department
    owns it and because it runs there); their order is kept, renderers sort where order matters.
    """

    slug: str  # DNS-1123 label, also the Kubernetes namespace name
    name: str
    guaranteed_gpus: int
    limit_gpus: int | None  # None = no limit
    vlan_id: int  # 1..4094
    vxlan_vni: int  # 1..16777215
    pkey: int  # InfiniBand partition key, 0x0001..0x7ffe
    port_guids: tuple[str, ...]  # "0x" + 16 hex digits
    network_cidr: str  # e.g. "10.42.3.0/24"
    export_path: str  # e.g. "/exports/tenants/<slug>"
    storage_quota_gib: int
    projects: tuple[ProjectSpec, ...] = ()  # empty: the department is not split (rendered as before)
    weight: str = "1"  # the department's over-quota weight (its Cohort's fairSharing.weight, with projects)

    def __post_init__(self) -> None:
        # The slug becomes namespaces, accounts and partitions we create and police (tenancy.naming): the
        # rules the model validates at save, reserved names (Kubernetes' own namespaces...) included.
        if (why := naming.slug_error(self.slug)) is not None:
            raise ValueError(f"department slug {self.slug!r}: {why}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"department {self.slug!r}: name must be a non-empty string")
        _check_int_range(self.guaranteed_gpus, 0, None, f"department {self.slug!r}: guaranteed_gpus")
        if self.limit_gpus is not None:
            _check_int_range(self.limit_gpus, 0, None, f"department {self.slug!r}: limit_gpus")
            if self.limit_gpus < self.guaranteed_gpus:
                raise ValueError(
                    f"department {self.slug!r}: limit_gpus ({self.limit_gpus}) is below "
                    f"guaranteed_gpus ({self.guaranteed_gpus})"
                )
        _check_int_range(self.vlan_id, VLAN_MIN, VLAN_MAX, f"department {self.slug!r}: vlan_id")
        _check_int_range(self.vxlan_vni, VNI_MIN, VNI_MAX, f"department {self.slug!r}: vxlan_vni")
        if not _is_int(self.pkey) or not PKEY_MIN <= self.pkey <= PKEY_MAX:
            raise ValueError(
                f"department {self.slug!r}: pkey {self.pkey!r} is outside 0x{PKEY_MIN:04x}..0x{PKEY_MAX:04x}"
            )
        if isinstance(self.port_guids, str) or not isinstance(self.port_guids, Iterable):
            raise ValueError(f"department {self.slug!r}: port_guids must be a sequence of GUID strings")
        guids = tuple(dict.fromkeys(_normalise_guid(g, self.slug) for g in self.port_guids))
        object.__setattr__(self, "port_guids", guids)
        try:
            network = ipaddress.ip_network(self.network_cidr, strict=True)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"department {self.slug!r}: network_cidr {self.network_cidr!r} is not a network "
                f"address with prefix length (host bits must be zero): {exc}"
            ) from None
        object.__setattr__(self, "network_cidr", str(network))
        # Checked again here although the model refuses it at save: a row saved before the rule must not
        # reach /etc/exports (a line break or "*(rw)" in it would export to the world).
        if problem := export_path_problem(self.export_path):
            raise ValueError(f"department {self.slug!r}: export_path {self.export_path!r} {problem}")
        _check_int_range(self.storage_quota_gib, 1, None, f"department {self.slug!r}: storage_quota_gib")
        self._check_projects()

    def _check_projects(self) -> None:
        projects = tuple(self.projects)
        object.__setattr__(self, "projects", projects)
        slugs: set[str] = set()
        for p in projects:
            if not isinstance(p, ProjectSpec):
                raise ValueError(f"department {self.slug!r}: expected ProjectSpec, got {type(p).__name__}")
            if p.slug in slugs:
                raise ValueError(f"department {self.slug!r}: project {p.slug!r} appears more than once")
            slugs.add(p.slug)
            _check_dns_label(project_namespace(self, p), f"department {self.slug!r}: project namespace")
        total = sum(p.guaranteed_gpus for p in projects)
        if total > self.guaranteed_gpus:
            raise ValueError(
                f"department {self.slug!r}: its projects are guaranteed {total} GPUs, more than its "
                f"{self.guaranteed_gpus}"
            )

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(self.network_cidr)


def project_namespace(t: TenantSpec, p: ProjectSpec) -> str:
    """A project's namespace, also its ClusterQueue's name: `<department slug>--<project slug>`, which no
    department's slug nor another project's namespace can equal (tenancy.naming)."""
    return naming.project_namespace(t.slug, p.slug)


def _check_unique(tenants: Sequence[TenantSpec], attr: str, fmt=str) -> None:
    seen: dict[Any, str] = {}
    for t in tenants:
        value = getattr(t, attr)
        if value in seen:
            raise ValueError(f"{attr} {fmt(value)} is used by both {seen[value]!r} and {t.slug!r}")
        seen[value] = t.slug


def _as_tenants(tenants: Iterable[TenantSpec]) -> list[TenantSpec]:
    tenants = list(tenants)
    for t in tenants:
        if not isinstance(t, TenantSpec):
            raise TypeError(f"expected TenantSpec, got {type(t).__name__}")
    seen: set[str] = set()
    for t in tenants:
        if t.slug in seen:
            raise ValueError(f"department slug {t.slug!r} appears more than once")
        seen.add(t.slug)
    return tenants


_IPV4_MAPPED = int(ipaddress.IPv6Address("::ffff:0:0"))


def _as_ipv6(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> ipaddress.IPv6Network:
    """An IPv4 network as the IPv4-mapped IPv6 network (::ffff:a.b.c.d/96+n) its hosts are to a dual-stack
    server; an IPv6 network as it is."""
    if network.version == 6:
        return network
    return ipaddress.IPv6Network((_IPV4_MAPPED | int(network.network_address), 96 + network.prefixlen))


def networks_overlap(a, b) -> bool:
    """Whether two tenant networks share an address, across IP versions too: `::/0` and `::ffff:0:0/96`
    hold every IPv4 host in its mapped form, so an export to them reaches every other department's hosts
    (Python's `overlaps` says False for two versions)."""
    return _as_ipv6(a).overlaps(_as_ipv6(b))


def _check_exports_disjoint(tenants: Sequence[TenantSpec]) -> None:
    """Storage isolation: no department's export may contain another's, nor its network another's."""
    for i, a in enumerate(tenants):
        for b in tenants[i + 1 :]:
            if a.export_path == b.export_path:
                raise ValueError(f"export_path {a.export_path!r} is used by both {a.slug!r} and {b.slug!r}")
            outer, inner = sorted((a, b), key=lambda t: len(t.export_path))
            if inner.export_path.startswith(outer.export_path + "/"):
                raise ValueError(
                    f"export_path {inner.export_path!r} of {inner.slug!r} lies inside "
                    f"{outer.export_path!r} of {outer.slug!r}: {outer.slug!r} could read its data"
                )
            if networks_overlap(a.network, b.network):
                raise ValueError(
                    f"network_cidr {a.network_cidr} of {a.slug!r} overlaps {b.network_cidr} of {b.slug!r}: "
                    "hosts of one department could mount the other's export"
                )


def validate_tenants(tenants: Iterable[TenantSpec]) -> list[TenantSpec]:
    """Every cross-department invariant at once (for services that save several departments).

    Slugs, partition keys, VLAN IDs and VXLAN VNIs are unique; exports and networks do not overlap.
    Each renderer checks the subset it depends on; this returns the tenants as a list.
    """
    tenants = _as_tenants(tenants)
    _check_unique(tenants, "pkey", lambda v: f"0x{v:04x}")
    _check_unique(tenants, "vlan_id")
    _check_unique(tenants, "vxlan_vni")
    _check_exports_disjoint(tenants)
    return tenants


# --- OpenSM partitions.conf ---------------------------------------------------------------------------

# OpenSM reads partitions.conf with fgets() into a 4096-byte buffer (osm_prtn_config.c), so a longer
# physical line is cut and a GUID can be split in two. Member lists are wrapped after a ',' instead, which
# the grammar allows ("The Line can be wrapped after ':' ... and between"); continuation lines are indented.
OPENSM_MAX_LINE = 4000


def opensm_partition_name(t: TenantSpec) -> str:
    """Partition name for a department: the slug with '-' -> '_' (tenancy.naming.opensm_partition).

    Slugs only contain [a-z0-9-], so the name never contains OpenSM's delimiters ('=', ',', ':', ';', '#')
    or whitespace, never collides with "Default" (upper case), and stays unique because slugs are.
    """
    return naming.opensm_partition(t.slug)


def _entry_lines(head: str, members: list[str]) -> list[str]:
    """`head` followed by the members and ` ;`, wrapped after a ',' so that no line exceeds the limit."""
    if not members:
        return [f"{head} ;"]
    lines: list[str] = []
    current, on_line = head, 0
    for i, member in enumerate(members):
        piece = member + ("," if i < len(members) - 1 else " ;")
        if on_line and len(current) + 1 + len(piece) > OPENSM_MAX_LINE:
            lines.append(current)
            current, on_line = "   ", 0  # continuation lines are indented by four spaces
        current = f"{current} {piece}"
        on_line += 1
    lines.append(current)
    return lines


def render_opensm_partitions(
    tenants: Iterable[TenantSpec], default_membership: Literal["full", "limited"] = "full"
) -> str:
    """OpenSM partitions.conf: the default partition, then one partition per department, by PKey.

    Example line: `ml_research=0x0010, ipoib, defmember=full : 0x0002c90300a1b2c3=full ;`

    Decision (department without ports): the entry is still written, with an empty member list
    (`name=0x0011, ipoib, defmember=full : ;`). OpenSM's doc/partition-config.txt states "Empty list means no
    ports in this partition", and the parser (osm_prtn_config.c, partition_add_port) skips an empty member
    token. Keeping the entry reserves the PKey and creates the IPoIB broadcast group, so adding the first
    tray later only adds members.

    `default_membership="full"` renders the default partition exactly as OpenSM's default gives it
    (`Default=0x7fff, ipoib : ALL=full ;`). Note that with it every port stays a full member of 0x7fff and
    can reach every other port there, so the department PKeys separate IPoIB subnets but do not isolate the
    fabric. `"limited"` renders `Default=0x7fff, ipoib : ALL=limited, ALL_SWITCHES=full, SELF=full ;`:
    end ports can then only talk to the SM and switches on the default partition, which is what makes the
    department partitions an isolation boundary.
    """
    tenants = _as_tenants(tenants)
    _check_unique(tenants, "pkey", lambda v: f"0x{v:04x}")
    if default_membership == "full":
        lines = ["Default=0x7fff, ipoib : ALL=full ;"]
    elif default_membership == "limited":
        lines = ["Default=0x7fff, ipoib : ALL=limited, ALL_SWITCHES=full, SELF=full ;"]
    else:
        raise ValueError(f"default_membership must be 'full' or 'limited', got {default_membership!r}")
    for t in sorted(tenants, key=lambda t: t.pkey):
        head = f"{opensm_partition_name(t)}=0x{t.pkey:04x}, ipoib, defmember=full :"
        members = [f"{guid}=full" for guid in sorted(t.port_guids)]
        lines.extend(_entry_lines(head, members))
    return "\n".join(lines) + "\n"


# --- NFS exports --------------------------------------------------------------------------------------

NFS_EXPORT_OPTIONS = "rw,sync,no_subtree_check,root_squash"


def _check_nfs_server(nfs_server: str) -> None:
    if isinstance(nfs_server, str):
        try:
            ipaddress.ip_address(nfs_server)
            return
        except ValueError:
            pass
        if len(nfs_server) <= 253 and _DNS1123_SUBDOMAIN.match(nfs_server.lower()):
            return
    raise ValueError(f"nfs_server {nfs_server!r} is neither an IP address nor a DNS name")


def render_nfs_exports(tenants: Iterable[TenantSpec]) -> str:
    """/etc/exports lines, one per department, ordered by export path:
    `<export_path> <network_cidr>(rw,sync,no_subtree_check,root_squash)`.

    exports(5): no whitespace between the client and its option list (with a space the options would
    apply to the whole world). Export paths may not repeat or nest and networks may not overlap, since
    either would give one department access to another's data.
    """
    tenants = _as_tenants(tenants)
    _check_exports_disjoint(tenants)
    lines = [
        f"{t.export_path} {t.network_cidr}({NFS_EXPORT_OPTIONS})"
        for t in sorted(tenants, key=lambda t: t.export_path)
    ]
    return "".join(line + "\n" for line in lines)
