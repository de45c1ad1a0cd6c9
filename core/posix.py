"""The POSIX identity a job runs as: its person's login name, user and group ids and extra groups.

Pure data, no Django: the job backends (integrations.slurm, integrations.kubernetes) take it from the dispatch
request and run the work as this identity (Slurm: submitted as the user through slurmrestd; Kubernetes:
runAsUser, runAsGroup, fsGroup, supplementalGroups). Where it comes from (LDAP's uidNumber/gidNumber, OpenID
Connect claims, an administrator's mapping) is tenancy's business.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# POSIX portable user names (IEEE 1003.1 3.437) as useradd and Slurm take them: no leading hyphen, at most 32.
NAME_RE = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")  # use fullmatch: "$" would let "alice\n" through
# Never root (0), never the nobody/nogroup ids (65534), never beyond the 32-bit ids Linux and Kubernetes take.
MIN_ID = 1
MAX_ID = 2**31 - 1
RESERVED_IDS = frozenset({0, 65534})
# Slurm runs a job as the uid the NODE's user database gives the login name, whatever uid Rackplane holds:
# a person must never be named as root, nobody or a daemon's account (Debian's base and Slurm's own users).
RESERVED_NAMES = frozenset(
    {
        "root", "nobody", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp",
        "proxy", "www-data", "backup", "list", "irc", "gnats", "_apt", "messagebus", "sshd", "polkitd",
        "systemd-network", "systemd-resolve", "systemd-timesync", "slurm", "slurmrestd", "slurmrest",
        "munge", "postgres", "redis", "mysql", "openldap", "prometheus",
    }
)  # fmt: skip


def name_problem(name: object) -> str | None:
    """Why `name` is not a login name a job may run as, or None."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        return "is not a POSIX user name (lower-case letters, digits, _ . -; at most 32)"
    if name in RESERVED_NAMES:
        return "is a system account's name: a job never runs as it"
    return None


def id_problem(value: object) -> str | None:
    """Why `value` is not an id a job may run as, or None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return "must be a whole number"
    if value in RESERVED_IDS:
        return "0 (root) and 65534 (nobody) are never given to a job"
    if not MIN_ID <= value <= MAX_ID:
        return f"must be from {MIN_ID} to {MAX_ID}"
    return None


@dataclass(frozen=True)
class PosixIdentity:
    name: str  # login name on the nodes (Slurm user, LDAP uid)
    uid: int
    gid: int  # primary group
    groups: tuple[int, ...] = ()  # supplementary group ids, sorted, without the primary one

    def __post_init__(self) -> None:
        if (why := name_problem(self.name)) is not None:
            raise ValueError(f"{self.name!r} {why}")
        for label, value in (("uid", self.uid), ("gid", self.gid), *(("group", g) for g in self.groups)):
            problem = id_problem(value)
            if problem:
                raise ValueError(f"{label} {value!r} {problem}")


# --- which backends need one ----------------------------------------------------------------------------
# Whether jobs of a backend ("slurm", "kubernetes") must run as their person is the integrations' business (a
# Slurm target with slurmrestd, a Kubernetes cluster: yes; the embedded renderer of `make run`: no). They
# register the one rule here, so that the layers below them (scheduling's submission) can ask it.
_required: Callable[[str], bool] | None = None


def register_identity_requirement(check: Callable[[str], bool]) -> None:
    """`check(backend)` says whether jobs of `backend` run as their person now (integrations.dispatch)."""
    global _required
    _required = check


def identity_required(backend: str) -> bool:
    """Whether a job for `backend` needs its person's POSIX identity (False until a rule is registered)."""
    return bool(_required and _required(backend))


def no_identity_message(where: str = "") -> str:
    """What a person without an identity is told (the submission form, the API, a refused dispatch)."""
    return (
        f"Your account has no POSIX identity (uid/gid), and jobs on {where or 'this backend'} run as their "
        "person's Unix user: ask a platform admin to map your login name, uid and gid, or sign in through "
        "your site's LDAP or OpenID Connect, which gives them."
    )
