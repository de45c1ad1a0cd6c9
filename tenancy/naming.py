"""Every identifier Rackplane derives from a tenant's slugs, in one place.

Pure Python, no Django import: the models (validators, `Project.namespace`), the renderers (tenancy.renderers,
integrations.state, integrations.slurm) and the job backends (integrations.jobs `DispatchRequest.home`) all
call these functions, so a name is built one way only.

Decision (collision-free by construction rather than by a table of reserved names):
* A slug (department's or project's) is 1-30 characters: a lower-case letter, then lower-case letters and
  digits, with single hyphens between them (`SLUG_PATTERN`). So no slug holds `--`, starts with a digit or a
  hyphen, or ends with a hyphen.
* A department's names are its slug: its Kubernetes namespace, Kueue ClusterQueue and Cohort, Slurm account
  and QOS (and `<slug>--borrowed`, the QOS of its jobs beyond the guarantee), the Slurm partition of its
  dedicated NVLink partitions, its OpenSM partition (with `_` for `-`), the `<export root>/<slug>` storage
  path, the `rackplane-<slug>-data` PersistentVolume.
* A project's names are `<department slug>--<project slug>`: its namespace, ClusterQueue and Slurm account.
  No department slug holds `--`, so no project name can equal a department's; and since neither slug starts
  or ends with `-` nor holds `--`, the `--` in a project name is exactly one place: it splits back into one
  (department, project) pair, so two projects never share a name. Department slugs are unique (a database
  constraint) and project slugs unique per department (another), hence every derived name is.
* Lengths: a project namespace is at most 30 + 2 + 30 = 62 characters (a DNS-1123 label: at most 63); the
  OpenSM partition name at most 30 (OpenSM keeps 31 characters of it, `char name[32]` in osm_prtn_t, and
  compares names on those only).
* Starting with a letter keeps every name a DNS-1035 label too (a Service name), never a number to a YAML
  reader (`1e3`) and never all digits (Slurm takes a bare number for an id in several commands).
* Reserved department slugs (`RESERVED_SLUGS`, prefix `kube-`): Kubernetes' own namespaces (`default`,
  `kube-*`; `kube` too, since its projects' namespaces would be `kube--*`), the namespaces of what Rackplane
  drives or runs in (Kueue, the NVIDIA DRA driver and GPU operator, Rackplane itself), Slurm's `root` account
  and `normal` QOS, the shared Slurm partition `gpu` (integrations.state.SHARED_TIER), and `all`/`none`,
  which Slurm reads as keywords in `AllowQos=` / `AllowAccounts=` (a QOS named `all` would open a dedicated
  partition to every department). Project slugs reserve nothing: they never stand alone as a name.
* Slurm partitions (`slurm_partition`): an NVLink partition dedicated to a department is served by the
  department's partition (its slug), whatever service tier it was given; any other by its service tier,
  `gpu` or `gpu_<name>` (inventory.names, checked at save), or the shared `gpu` when it has none. No slug
  holds `_` and `gpu` is reserved, so a tier never names a department's partition: every Slurm partition
  has exactly one owner (everyone, or one department). Its trays in MIG mode are served by
  `<partition>--mig` (`mig_partition`), where slice jobs share a node.

Slurm lower-cases account and QOS names; slugs are lower case already, so the name Rackplane renders is the
name Slurm keeps.
"""

from __future__ import annotations

import re
import unicodedata

from core.sentences import gettext_noop
from inventory.names import SHARED_TIER, service_tier_error

SLUG_MAX = 30
SEPARATOR = "--"  # between a department's slug and a project's; never inside a slug
# A letter, then letters and digits with single hyphens between them. \A and \Z (not ^ and $: `$` matches
# before a trailing newline in Python); PostgreSQL's regular expressions read them the same way.
SLUG_PATTERN = r"\A[a-z](?:-?[a-z0-9])*\Z"
_SLUG = re.compile(SLUG_PATTERN)

SHARED_PARTITION = SHARED_TIER  # "gpu", the shared Slurm partition (inventory.names, integrations.state)
RESERVED_SLUGS = frozenset(
    {
        # Kubernetes
        "default",
        "kube",
        # what Rackplane drives or runs in (deploy/kubernetes, Kueue, NVIDIA DRA driver and GPU operator)
        "rackplane",
        "kueue-system",
        "nvidia-dra-driver-gpu",
        "gpu-operator",
        # Slurm: the root account, the default QOS, the shared partition, AllowQos/AllowAccounts keywords
        "root",
        "normal",
        SHARED_PARTITION,
        "all",
        "none",
    }
)
RESERVED_PREFIXES = ("kube-",)

DNS1123_LABEL_MAX = 63
OPENSM_NAME_MAX = 31


def slug_error(slug: object, *, department: bool = True) -> str | None:
    """Why `slug` cannot be a department's (`department=True`) or a project's slug; None when it can."""
    if not isinstance(slug, str) or not slug:
        return "a slug is required"
    if len(slug) > SLUG_MAX:
        return f"at most {SLUG_MAX} characters (this one has {len(slug)})"
    if _SLUG.match(slug) is None:
        if slug != slug.lower():
            return "use lower-case letters: it becomes a Kubernetes namespace and a Slurm account"
        if not slug[0].isalpha() or not slug[0].isascii():
            return "start with a letter (a-z)"
        if SEPARATOR in slug:
            return f"no '{SEPARATOR}': it separates a department's slug from its projects' in their names"
        if slug.endswith("-"):
            return "end with a letter or a digit"
        return "use only lower-case letters (a-z), digits and single hyphens"
    if department and (slug in RESERVED_SLUGS or slug.startswith(RESERVED_PREFIXES)):
        return f"{slug!r} is reserved (Kubernetes, Slurm or Rackplane use the name): choose another"
    return None


def is_slug(slug: object, *, department: bool = True) -> bool:
    return slug_error(slug, department=department) is None


DEFAULT_SLUG_PREFIX = "p-"  # before a name that starts with a digit ("3D Vision" -> "p-3d-vision")
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def default_slug(name: object, *, prefix: str = DEFAULT_SLUG_PREFIX) -> str:
    """The slug made from a name when none is typed: always a valid project slug, or "" when the name holds
    no letter or digit of the Latin alphabet (the caller then asks for one, `DEFAULT_SLUG_MISSING`).

    Accents are dropped ("Équipe" -> "equipe"), every run of other characters becomes one '-' (so never
    '--' or '_'), a name starting with a digit gets `prefix` ("3D Vision" -> "p-3d-vision"), and the result
    is cut to `SLUG_MAX` characters without a trailing '-'. A department's may still be a reserved name
    (`slug_error` says so)."""
    if not isinstance(name, str):
        return ""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    slug = _NOT_SLUG.sub("-", ascii_name.lower()).strip("-")
    if not slug:
        return ""
    if not slug[0].isalpha():
        slug = prefix + slug
    return slug[:SLUG_MAX].rstrip("-")


# Marked for the catalogue (the caller shows it in the viewer's language: tenancy.projects).
DEFAULT_SLUG_MISSING = gettext_noop(
    "no slug can be made from this name (it has no letters a-z or digits): type one, lower-case letters, "
    "digits and single hyphens, starting with a letter"
)


def _check(department: str, project: str | None = None) -> None:
    """Renderers are handed slugs from the database; a slug that slipped past validation (an old row, a
    hand edit) stops the rendering with the reason instead of producing a name that may collide."""
    if (why := slug_error(department)) is not None:
        raise ValueError(f"department slug {department!r}: {why}")
    if project is not None and (why := slug_error(project, department=False)) is not None:
        raise ValueError(f"project slug {project!r} of {department!r}: {why}")


# --- a department's names ---------------------------------------------------------------------------------


def department_namespace(department: str) -> str:
    """The department's Kubernetes namespace (also its ClusterQueue's, Cohort's and label value)."""
    _check(department)
    return department


department_cluster_queue = department_namespace
department_cohort = department_namespace
department_account = department_namespace  # the Slurm account, a child of `root`
department_qos = department_namespace  # the Slurm QOS holding its guarantee (GrpTRES), its jobs' default


def department_borrowed_qos(department: str) -> str:
    """The Slurm QOS of its jobs beyond the guarantee (borrowed GPUs): `<department>--borrowed`. QOS names
    are their own namespace in Slurm and no department slug holds `--`, so it never equals a department's
    QOS (a department slugged `ml-borrowed` has the QOS `ml-borrowed`, not `ml--borrowed`)."""
    _check(department)
    return f"{department}{SEPARATOR}borrowed"


dedicated_partition = department_namespace  # the Slurm partition of its dedicated NVLink partitions


def slurm_partition(service_tier: str, department: str | None) -> str:
    """The Slurm partition serving an NVLink partition: its department's when it is dedicated to one (the
    service tier is then not used), else its service tier, else the shared `gpu` partition."""
    if department:
        return dedicated_partition(department)
    if (why := service_tier_error(service_tier)) is not None:
        raise ValueError(f"service tier {service_tier!r}: {why}")
    return service_tier or SHARED_PARTITION


MIG_SUFFIX = "mig"


def mig_partition(slurm_partition: str) -> str:
    """The Slurm partition of the trays in MIG mode that `slurm_partition` would otherwise serve:
    `<partition>--mig` (`gpu--mig`, `research--mig`, `gpu_inference--mig`). Its jobs share a node, each
    holding only its MIG devices, where the whole-tray partitions give a job the whole node. No slug and no
    service tier holds `--`, so the name is never another partition's, and it keeps its one owner."""
    if SEPARATOR in slurm_partition or not slurm_partition:
        raise ValueError(f"{slurm_partition!r} is not a Slurm partition Rackplane names")
    return f"{slurm_partition}{SEPARATOR}{MIG_SUFFIX}"


def opensm_partition(department: str) -> str:
    """Its InfiniBand partition's name in OpenSM's partitions.conf: the slug with '_' for '-' (a one-to-one
    change: slugs hold no '_'); never 'Default' (upper case), never one of the grammar's delimiters."""
    _check(department)
    return department.replace("-", "_")


def persistent_volume(department: str) -> str:
    """The cluster-scoped PersistentVolume of its NFS export."""
    _check(department)
    return f"rackplane-{department}-data"


def export_path(root: str, department: str) -> str:
    """Its default storage export: `<export root>/<slug>` (one component per department)."""
    _check(department)
    return f"{root.rstrip('/')}/{department}"


# --- a project's names ------------------------------------------------------------------------------------


def project_namespace(department: str, project: str) -> str:
    """The project's Kubernetes namespace (also its ClusterQueue's): `<department>--<project>`."""
    _check(department, project)
    return f"{department}{SEPARATOR}{project}"


project_cluster_queue = project_namespace
project_account = project_namespace  # the Slurm account, a child of its department's


def home(department: str, project: str = "") -> str:
    """Where a job runs: its project's namespace / Slurm account, else its department's."""
    return project_namespace(department, project) if project else department_namespace(department)


def split(name: str) -> tuple[str, str | None]:
    """A derived name back to (department slug, project slug or None): the inverse of `home`."""
    department, sep, project = name.partition(SEPARATOR)
    return (department, project) if sep else (department, None)


def identifiers(department: str, projects: tuple[str, ...] | list[str] = ()) -> dict[str, set[str]]:
    """Every name a department and its projects are given, by consumer (for tests and checks):
    `namespace`, `slurm_account`, `slurm_qos`, `slurm_partition`, `opensm_partition`, `persistent_volume`."""
    names = {
        "namespace": {department_namespace(department)},
        "slurm_account": {department_account(department)},
        "slurm_qos": {department_qos(department), department_borrowed_qos(department)},
        "slurm_partition": {dedicated_partition(department), mig_partition(dedicated_partition(department))},
        "opensm_partition": {opensm_partition(department)},
        "persistent_volume": {persistent_volume(department)},
    }
    for project in projects:
        names["namespace"].add(project_namespace(department, project))
        names["slurm_account"].add(project_account(department, project))
    return names
