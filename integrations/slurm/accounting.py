"""Slurm accounting pushed for real: department QOS, the account tree and who may submit, through slurmrestd's
`/slurmdb/v0.0.NN/` endpoints (the same slurmrestd, JWT and API version the job backend uses, negotiated with
slurmrestd: integrations.slurm.versions; no sacctmgr).

What Rackplane decides (integrations.state: `slurm_accounts`, `ConfigState.qos`, `ConfigState.associations`)
is made true in slurmdbd here, diffed first so that a second push sends nothing:

1. QOS: each department's two (integrations.state.department_qos): its own, `GrpTRES=gres/gpu=<guarantee>`,
   and `<department>--borrowed`, without a GPU limit (the TRES cleared with count -1): its account's holds it.
2. Accounts, parents first: a department's account under `root`, its projects' under it; each account's
   association allows only its department's two QOS, makes its own the default, and carries the account's
   own `GrpTRES=gres/gpu` limit (the department's limit holds in-quota and borrowed jobs together).
3. Users: an association for every (account, person) Rackplane lets submit; a person Slurm does not know yet
   is added with that account as their default account. A person's association in a Rackplane account that
   is no longer wanted (left the department) is deleted, unless it is their default account and they still
   have another (Slurm keeps a user's default; it is moved first).

Accounts Rackplane made carry `organization=rackplane`; accounts of anyone else are never changed or removed.
An account Rackplane no longer wants (a department deleted) is left in slurmdbd: removing it would refuse
while jobs are known, and its associations stop mattering once nobody submits to it (docs/identifiers.md).

What slurmrestd 24.11 does, measured on the testbed (scripts/slurm-testbed.sh, slurmdbd on MariaDB):

* `POST /accounts/` makes an account without any association (jobs cannot use it);
  `POST /accounts_association/` makes the account and its cluster association (`parent`, `qoslevel`,
  `defaultqos`, `grptres`) in one call. `POST /users_association/` makes a user and their first association
  (`defaultaccount`). `POST /associations/` changes an existing association (an account's with `user: ""`)
  and adds a user association for a user slurmdbd already knows; its `user` field is required.
* In v0.0.42 an association's GrpTRES is `max.tres.total` and a QOS's is `limits.max.tres.total`; a TRES
  with count -1 clears the limit. The same fields, requests and answers in v0.0.45 on Slurm 26.05.5 (the
  accounting tests pass on both testbeds, each at the newest version it serves).
* Every write answers 200 with `errors: []` also when it changed nothing.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.errors import ExternalError
from core.http import HttpClient
from core.outbound import ALLOW_PRIVATE_SETTING
from integrations.jobs import BackendRejected, BackendUnavailable
from integrations.slurm.jobs import SlurmJobBackend, backend_from_settings
from integrations.slurm.render import DepartmentQos, SlurmAccount, SlurmAssociation
from integrations.slurm.rest import classify_error
from integrations.slurm.target import SlurmError, SlurmRejected, SlurmUnavailable
from integrations.slurm.topology import check_name

DB_API = "/slurmdb"  # then the job backend's API version: /slurmdb/v0.0.45/qos/
ORGANIZATION = "rackplane"  # marks the accounts Rackplane made (and may change)
GPU = {"type": "gres", "name": "gpu"}


@dataclass(frozen=True)
class AccountingPlan:
    """Everything Rackplane wants slurmdbd to hold for one cluster."""

    qos: tuple[DepartmentQos, ...]
    accounts: tuple[SlurmAccount, ...]
    associations: tuple[SlurmAssociation, ...]

    def check(self) -> None:
        """ValueError for a name Slurm cannot take, or an association to an account not in the tree."""
        for q in self.qos:
            check_name("QOS", q.name)
        names = {a.name for a in self.accounts}
        for account in self.accounts:
            check_name("account", account.name)
            for qos in account.qos:
                check_name("QOS", qos)
        for association in self.associations:
            check_name("user", association.user)
            if association.account not in names:
                raise ValueError(f"{association.user}: account {association.account} is not in the tree")


@dataclass
class AccountingResult:
    changed: list[str] = field(default_factory=list)  # one line per change, in the order made
    unchanged: int = 0  # QOS, accounts and associations already as wanted
    left: list[str] = field(default_factory=list)  # what was not done, and why
    removed: list[tuple[str, str]] = field(default_factory=list)  # (account, user) associations deleted


# --- what slurmdbd holds, and what to send (pure) --------------------------------------------------------


def _gres_limits(tres: Any) -> dict[str, int]:
    """The GRES limits of a TRES list by name (`gpu`, `gpu:1g.23gb`); a cleared one (-1) is none."""
    limits = {}
    for entry in tres or []:
        if isinstance(entry, Mapping) and entry.get("type") == "gres" and isinstance(entry.get("name"), str):
            count = entry.get("count")
            if isinstance(count, int) and count >= 0:
                limits[entry["name"]] = count
    return limits


def _gpus(tres: Any) -> int | None:
    """The gres/gpu count of a TRES list (None: no GPU limit)."""
    return _gres_limits(tres).get("gpu")


def _mig(tres: Any) -> tuple[tuple[str, int], ...]:
    """The gres/gpu:<profile> limits of a TRES list, by profile (integrations.state.mig_limits)."""
    return tuple(
        sorted((n.removeprefix("gpu:"), c) for n, c in _gres_limits(tres).items() if n.startswith("gpu:"))
    )


def _gpu_tres(
    limit: int | None, mig: Sequence[tuple[str, int]] = (), live_mig: Sequence[tuple[str, int]] = ()
) -> list[dict]:
    """gres/gpu (-1 clears it), each wanted gres/gpu:<profile>, and -1 for a live one no longer wanted."""
    wanted = dict(mig)
    tres = [{**GPU, "count": -1 if limit is None else limit}]
    tres += [{"type": "gres", "name": f"gpu:{p}", "count": n} for p, n in sorted(wanted.items())]
    tres += [{"type": "gres", "name": f"gpu:{p}", "count": -1} for p, _ in live_mig if p not in wanted]
    return tres


def _limits_text(limit: int | None, mig: Sequence[tuple[str, int]] = ()) -> str:
    return ",".join([f"gres/gpu={_text(limit)}", *(f"gres/gpu:{p}={n}" for p, n in sorted(mig))])


def _was(limit: int | None, mig: Sequence[tuple[str, int]], wanted_mig: Sequence[tuple[str, int]]) -> str:
    """A live limit as a change's words name it: `gres/gpu 8` (no MIG limit either side), else in full."""
    return f"gres/gpu {_text(limit)}" if not mig and not wanted_mig else _limits_text(limit, mig)


def account_levels(accounts: Sequence[SlurmAccount]) -> list[SlurmAccount]:
    """Parents before their children (then by name): the order accounts must be made in."""
    by_name = {a.name: a for a in accounts}
    depth: dict[str, int] = {}

    def level(account: SlurmAccount) -> int:
        if account.name not in depth:
            parent = by_name.get(account.parent)
            depth[account.name] = 0 if parent is None else level(parent) + 1
        return depth[account.name]

    return sorted(accounts, key=lambda a: (level(a), a.name))


def qos_body(qos: DepartmentQos, live_mig: Sequence[tuple[str, int]] = ()) -> dict:
    return {
        "name": qos.name,
        "description": f"Rackplane department QOS {qos.name}",
        "limits": {"max": {"tres": {"total": _gpu_tres(qos.gpu_limit, qos.mig_limits, live_mig)}}},
    }


def account_association_body(
    account: SlurmAccount, cluster: str, live_mig: Sequence[tuple[str, int]] = ()
) -> dict:
    """An account's cluster association as POST /associations/ takes it (an existing one is changed)."""
    body: dict[str, Any] = {
        "account": account.name,
        "cluster": cluster,
        "user": "",
        "parent_account": account.parent,
        "max": {"tres": {"total": _gpu_tres(account.gpu_limit, account.mig_limits, live_mig)}},
        "shares_raw": account.shares,
    }
    if account.qos:
        body["qos"] = list(account.qos)
        body["default"] = {"qos": account.default_qos}
    return body


def new_account_body(account: SlurmAccount, cluster: str) -> dict:
    """POST /accounts_association/: the account and its association in one call."""
    association: dict[str, Any] = {"parent": account.parent, "fairshare": account.shares}
    if account.gpu_limit is not None or account.mig_limits:
        association["grptres"] = _gpu_tres(account.gpu_limit, account.mig_limits)
    if account.qos:
        association["qoslevel"] = list(account.qos)
        association["defaultqos"] = account.default_qos
    return {
        "association_condition": {
            "accounts": [account.name],
            "clusters": [cluster],
            "association": association,
        },
        "account": {"description": f"Rackplane account {account.name}", "organization": ORGANIZATION},
    }


def account_differs(account: SlurmAccount, live: Mapping[str, Any]) -> list[str]:
    """What of `account` its live association does not hold yet ([]: nothing)."""
    differences = []
    if live.get("parent_account") != account.parent:
        differences.append(f"parent {live.get('parent_account') or 'none'} -> {account.parent}")
    tres = _tres_of(live)
    limit, mig = _gpus(tres), _mig(tres)
    if limit != account.gpu_limit or mig != tuple(sorted(account.mig_limits)):
        wanted = account.mig_limits
        after = (
            _text(account.gpu_limit) if not mig and not wanted else _limits_text(account.gpu_limit, wanted)
        )
        differences.append(f"GrpTRES {_was(limit, mig, wanted)} -> {after}")
    if live.get("shares_raw") != account.shares:
        differences.append(f"fairshare {live.get('shares_raw')} -> {account.shares}")
    if account.qos:
        live_qos = sorted(live.get("qos") or [])  # slurmdbd answers them in its own order
        if live_qos != sorted(account.qos):
            differences.append(f"QOS {','.join(live_qos) or 'none'} -> {','.join(sorted(account.qos))}")
        if (live.get("default") or {}).get("qos") != account.default_qos:
            differences.append(f"default QOS -> {account.default_qos}")
    return differences


def _tres_of(association: Mapping[str, Any] | None) -> Any:
    return (((association or {}).get("max") or {}).get("tres") or {}).get("total")


def _text(limit: int | None) -> str:
    return "none" if limit is None else str(limit)


# --- the client ---------------------------------------------------------------------------------------


class SlurmAccounting:
    """slurmdbd through slurmrestd, as SlurmUser (the job backend's rest_user and token: only SlurmUser,
    root or a Slurm administrator may change accounts and QOS)."""

    def __init__(self, backend: SlurmJobBackend, cluster: str, *, allow_private: bool = True):
        check_name("cluster", cluster)
        self.backend = backend
        self.cluster = cluster
        self._http = HttpClient(
            backend.rest_url,
            headers={"Accept": "application/json"},
            timeout=backend.timeout,
            allow_private=allow_private,
        )

    def _call(self, method: str, path: str, body: Any = None) -> Mapping[str, Any]:
        try:
            where = f"{DB_API}/{self.backend.api_version}{path}"  # asks slurmrestd once, when not known yet
        except BackendUnavailable as error:
            raise SlurmUnavailable(str(error), "retry later") from error
        except BackendRejected as error:
            raise SlurmRejected(str(error), "point the target at a slurmrestd Rackplane knows") from error
        action = f"{method} {where}"
        try:
            token = self.backend._current_token()
            response = self._http.request(
                method,
                where,
                body,
                headers={"X-SLURM-USER-NAME": self.backend.user, "X-SLURM-USER-TOKEN": token},
            )
        except BackendUnavailable as error:
            raise SlurmUnavailable(str(error), "retry later") from error
        except ExternalError as error:
            raise SlurmUnavailable(
                f"{action}: slurmrestd at {self.backend.rest_url} did not answer ({error})",
                "retry later, once slurmrestd and slurmdbd run",
            ) from error
        decoded = response.json_or_text()
        problem = classify_error(response.status, decoded, action)
        if isinstance(problem, BackendUnavailable):
            raise SlurmUnavailable(str(problem), "retry later, once slurmrestd and slurmdbd answer")
        if isinstance(problem, BackendRejected):
            raise SlurmRejected(str(problem), "check the account, QOS and user names Rackplane sends")
        if not isinstance(decoded, Mapping):
            raise SlurmUnavailable(f"{action}: slurmrestd answered HTTP {response.status} without JSON")
        return decoded

    # -- reading --

    def live_qos(self) -> dict[str, tuple[int | None, tuple[tuple[str, int], ...]]]:
        """QOS name -> (its gres/gpu limit, its gres/gpu:<profile> limits)."""
        body = self._call("GET", "/qos/")
        live = {}
        for q in body.get("qos") or []:
            if isinstance(q, Mapping) and isinstance(q.get("name"), str):
                tres = (((q.get("limits") or {}).get("max") or {}).get("tres") or {}).get("total")
                live[q["name"]] = (_gpus(tres), _mig(tres))
        return live

    def live_accounts(self) -> dict[str, str]:
        """Account name -> its organization."""
        body = self._call("GET", "/accounts/")
        return {
            a["name"]: str(a.get("organization") or "")
            for a in body.get("accounts") or []
            if isinstance(a, Mapping) and isinstance(a.get("name"), str)
        }

    def live_associations(self) -> dict[tuple[str, str], Mapping[str, Any]]:
        """(account, user) -> association ("" for an account's own), of this cluster, without partitions."""
        body = self._call("GET", "/associations/?" + urllib.parse.urlencode({"cluster": self.cluster}))
        return {
            (a.get("account") or "", a.get("user") or ""): a
            for a in body.get("associations") or []
            if isinstance(a, Mapping) and a.get("cluster") == self.cluster and not a.get("partition")
        }

    # -- applying --

    def apply(self, plan: AccountingPlan) -> AccountingResult:
        """Make slurmdbd hold `plan` (see the module docstring); only differences are sent."""
        plan.check()
        result = AccountingResult()
        self._apply_qos(plan.qos, result)
        accounts = self.live_accounts()
        associations = self.live_associations()
        foreign = sorted(a.name for a in plan.accounts if accounts.get(a.name, ORGANIZATION) != ORGANIZATION)
        if foreign:
            result.left.append(
                f"accounts {', '.join(foreign)} exist in slurmdbd but were not made by Rackplane "
                "(organization is not 'rackplane'): left as they are, with their users"
            )
        wanted = [a for a in account_levels(plan.accounts) if a.name not in foreign]
        self._apply_accounts(wanted, associations, result)
        self._apply_users(
            [s for s in plan.associations if s.account not in foreign], {a.name for a in wanted}, result
        )
        return result

    def _apply_qos(self, wanted: Iterable[DepartmentQos], result: AccountingResult) -> None:
        live = self.live_qos()
        changes = [q for q in wanted if live.get(q.name) != (q.gpu_limit, tuple(sorted(q.mig_limits)))]
        result.unchanged += sum(1 for q in wanted if q not in changes)
        if changes:
            none: tuple = (None, ())
            bodies = [qos_body(q, live.get(q.name, none)[1]) for q in changes]
            self._call("POST", "/qos/", {"qos": bodies})
            for q in changes:
                before = "added," if q.name not in live else f"GrpTRES {_was(*live[q.name], q.mig_limits)} ->"
                result.changed.append(
                    f"QOS {q.name}: {before} GrpTRES={_limits_text(q.gpu_limit, q.mig_limits)}"
                )

    def _apply_accounts(
        self,
        wanted: Sequence[SlurmAccount],
        live: Mapping[tuple[str, str], Mapping[str, Any]],
        result: AccountingResult,
    ) -> None:
        changed = []
        for account in wanted:  # parents first: a child's parent association must exist
            current = live.get((account.name, ""))
            if current is None:
                self._call("POST", "/accounts_association/", new_account_body(account, self.cluster))
                result.changed.append(
                    f"account {account.name}: added under {account.parent}"
                    + (f", QOS {','.join(account.qos)}" if account.qos else "")
                    + f", GrpTRES={_limits_text(account.gpu_limit, account.mig_limits)}"
                    + f", fairshare {account.shares}"
                )
            elif differences := account_differs(account, current):
                changed.append(account)
                result.changed.append(f"account {account.name}: {'; '.join(differences)}")
            else:
                result.unchanged += 1
        if changed:
            self._call(
                "POST",
                "/associations/",
                {
                    "associations": [
                        account_association_body(a, self.cluster, _mig(_tres_of(live.get((a.name, "")))))
                        for a in changed
                    ]
                },
            )

    def _apply_users(
        self, wanted: Sequence[SlurmAssociation], managed: set[str], result: AccountingResult
    ) -> None:
        live = self.live_associations()
        known_users = {user for (_, user) in live if user}
        have = {(account, user) for (account, user) in live if user}
        want = {(a.account, a.user) for a in wanted}
        result.unchanged += len(want & have)
        new_users: dict[str, str] = {}  # user -> the account they are added with (their default)
        more: list[tuple[str, str]] = []
        for account, user in sorted(want - have):  # a department's account sorts before its projects'
            if user not in known_users and user not in new_users:
                new_users[user] = account
            else:
                more.append((account, user))
        for user, account in new_users.items():
            self._call(
                "POST",
                "/users_association/",
                {
                    "association_condition": {
                        "accounts": [account],
                        "users": [user],
                        "clusters": [self.cluster],
                    },
                    "user": {"defaultaccount": account},
                },
            )
            result.changed.append(f"user {user}: added, may submit under {account} (their default account)")
        if more:
            self._call(
                "POST",
                "/associations/",
                {"associations": [{"account": a, "cluster": self.cluster, "user": u} for a, u in more]},
            )
            result.changed += [f"user {u}: may submit under {a}" for a, u in more]
        # Who no longer may submit under an account Rackplane manages loses the association.
        removing = {(account, user) for (account, user) in have - want if account in managed}
        for account, user in sorted(removing):
            if live[(account, user)].get("is_default"):
                others = sorted(a for (a, u) in (have | want) - removing if u == user)
                if not others:
                    result.left.append(
                        f"user {user}: may no longer submit under {account}, but it is their default account "
                        "and they have no other: Slurm keeps a user's last association (remove the user in "
                        "slurmdbd if they left)"
                    )
                    continue
                self._call("POST", "/users/", {"users": [{"name": user, "default": {"account": others[0]}}]})
            query = urllib.parse.urlencode({"cluster": self.cluster, "account": account, "user": user})
            try:
                self._call("DELETE", f"/association/?{query}")
            except SlurmError as error:  # "Job(s) active" (7001) while their jobs run: the next push retries
                result.left.append(
                    f"user {user}: may no longer submit under {account}, but slurmdbd: {error}"
                )
                continue
            result.changed.append(f"user {user}: may no longer submit under {account}")
            result.removed.append((account, user))


def accounting_from_settings(settings: Mapping[str, Any], cluster: str) -> SlurmAccounting:
    """The accounting client of a Slurm target's cleaned settings (its slurmrestd, rest_user and JWT)."""
    try:
        backend = backend_from_settings(settings)
    except (BackendRejected, BackendUnavailable) as error:
        raise SlurmUnavailable(
            str(error), "give the Slurm target slurmrestd's address and its JWT"
        ) from error
    return SlurmAccounting(backend, cluster, allow_private=bool(settings.get(ALLOW_PRIVATE_SETTING, True)))
