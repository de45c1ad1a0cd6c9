"""Who may submit under which Slurm account (integrations.state: the decision) and what the accounting push
sends for it (integrations.slurm.accounting: the pure parts). The push against the real slurmdbd:
tests/integration/test_slurm_accounting.py."""

from __future__ import annotations

import pytest

from core.access import Role
from integrations.slurm.accounting import (
    AccountingPlan,
    account_association_body,
    account_differs,
    account_levels,
    new_account_body,
    qos_body,
)
from integrations.slurm.render import (
    DepartmentQos,
    SlurmAccount,
    SlurmAssociation,
    accounting_storage_tres,
    render_account_script,
    sacctmgr_account_commands,
    sacctmgr_qos_commands,
)
from integrations.state import build_state, slurm_accounts
from inventory.models import ComputeTray
from tests.factories import give_posix_account, make_department, make_member, make_user, mig_tray


@pytest.mark.django_db
def test_who_may_submit_follows_the_portals_rule():
    from tenancy.models import Membership
    from tenancy.projects import create_project, set_project_member

    admin = make_user("root-admin", staff=True)  # a platform admin with a POSIX account: everywhere
    make_user("admin-without-posix", staff=True, posix=False)  # never submits to Slurm
    optics = make_department("Optics", slug="optics", guaranteed_gpus=0)
    make_department("Vision", slug="vision", guaranteed_gpus=0)
    lens = create_project(admin, optics, name="Lens", slug="lens", guaranteed_gpus=0)
    lead = make_member("lead", optics, role=Role.LEAD)  # uses every project of the department
    member = make_member("member", optics)
    set_project_member(admin, lens, member)
    other = make_member("other", optics)  # in the department, not in the project
    gone = make_member("gone", optics)
    gone.is_active = False  # an inactive account is nobody
    gone.save()
    left = make_user("left")  # still in the project, no longer in the department: may not use it
    Membership.objects.create(user=left, department=optics)
    set_project_member(admin, lens, left)
    Membership.objects.filter(user=left).delete()
    no_posix = make_user("no-posix", posix=False)
    Membership.objects.create(user=no_posix, department=optics)
    names = {u.pk: u.posix_account.name for u in (admin, lead, member, other)}

    pairs = {(a.account, a.user) for a in build_state().associations}

    assert pairs == {
        ("optics", names[admin.pk]),
        ("optics", names[lead.pk]),
        ("optics", names[member.pk]),
        ("optics", names[other.pk]),
        ("optics--lens", names[admin.pk]),
        ("optics--lens", names[lead.pk]),
        ("optics--lens", names[member.pk]),
        ("vision", names[admin.pk]),
    }
    give_posix_account(no_posix, name="nopos")
    assert ("optics", "nopos") in {(a.account, a.user) for a in build_state().associations}


@pytest.mark.django_db
def test_the_account_tree_allows_only_the_departments_qos(demo_inventory):
    """Two QOS a department: its own at the guarantee (the default), the borrowed one without a GPU limit
    of its own (the account's, the department's limit, holds it)."""
    from tenancy.projects import create_project

    optics = make_department("Optics", slug="optics", guaranteed_gpus=8, limit_gpus=16)
    create_project(make_user("admin", staff=True), optics, name="Lens", slug="lens", guaranteed_gpus=0)
    state = build_state()
    both = ("optics", "optics--borrowed")
    assert slurm_accounts(state) == [
        SlurmAccount("optics", "root", 16, both, shares=8),
        SlurmAccount("optics--lens", "optics", None, both),
    ]
    assert slurm_accounts(state)[0].default_qos == "optics"
    assert [(q.name, q.gpu_limit) for q in state.qos] == [("optics", 8), ("optics--borrowed", None)]


def test_accounts_are_made_parents_first():
    accounts = [SlurmAccount("b--x", "b"), SlurmAccount("a"), SlurmAccount("b"), SlurmAccount("a--y", "a")]
    assert [a.name for a in account_levels(accounts)] == ["a", "b", "a--y", "b--x"]


def test_the_bodies_slurmrestd_takes():
    account = SlurmAccount("optics--lens", "optics", 4, ("optics", "optics--borrowed"), shares=2)
    assert new_account_body(account, "c1") == {
        "association_condition": {
            "accounts": ["optics--lens"],
            "clusters": ["c1"],
            "association": {
                "parent": "optics",
                "fairshare": 2,  # the project's guarantee (assoc_rec_set.fairshare in v0.0.42's schema)
                "grptres": [{"type": "gres", "name": "gpu", "count": 4}],
                "qoslevel": ["optics", "optics--borrowed"],
                "defaultqos": "optics",
            },
        },
        "account": {"description": "Rackplane account optics--lens", "organization": "rackplane"},
    }
    body = account_association_body(SlurmAccount("optics", "root", None, "optics", shares=8), "c1")
    assert body["max"] == {
        "tres": {"total": [{"type": "gres", "name": "gpu", "count": -1}]}  # -1 clears the limit
    }
    assert body["shares_raw"] == 8  # assoc.shares_raw: what sacctmgr shows as Fairshare
    assert qos_body(DepartmentQos("optics", 8))["limits"] == {
        "max": {"tres": {"total": [{"type": "gres", "name": "gpu", "count": 8}]}}
    }


def test_what_differs_from_the_live_association():
    account = SlurmAccount("optics", "root", 8, ("optics", "optics--borrowed"), shares=4)
    live = {
        "parent_account": "root",
        "qos": ["optics--borrowed", "optics"],  # in slurmdbd's order, not ours
        "default": {"qos": "optics"},
        "max": {"tres": {"total": [{"type": "gres", "name": "gpu", "id": 1001, "count": 8}]}},
        "shares_raw": 4,
    }
    assert account_differs(account, live) == []
    assert account_differs(account, {**live, "shares_raw": 1}) == ["fairshare 1 -> 4"]
    assert account_differs(SlurmAccount("optics", "root", None, account.qos, shares=4), live) == [
        "GrpTRES gres/gpu 8 -> none"
    ]
    assert account_differs(account, {**live, "qos": ["normal", "optics"]}) == [
        "QOS normal,optics -> optics,optics--borrowed"
    ]
    assert account_differs(account, {**live, "default": {"qos": "optics--borrowed"}}) == [
        "default QOS -> optics"
    ]
    assert SlurmAccount("a", qos="a").qos == ("a",) and SlurmAccount("a", qos="").qos == ()


def test_a_plan_with_a_name_slurm_cannot_take_is_refused():
    with pytest.raises(ValueError, match="not a valid Slurm name"):
        AccountingPlan((), (SlurmAccount("a"),), (SlurmAssociation("a", "bad name"),)).check()
    with pytest.raises(ValueError, match="not in the tree"):
        AccountingPlan((), (SlurmAccount("a"),), (SlurmAssociation("b", "ada"),)).check()


# --- MIG slices in the limits (issue 30) -------------------------------------------------------------------

SLICES = (("1g.23gb", 7), ("3g.93gb", 2))


def test_a_qos_and_an_account_limit_each_mig_profile_beside_the_gpus():
    assert sacctmgr_qos_commands(DepartmentQos("optics", 1, SLICES))[1][-1] == (
        "GrpTRES=gres/gpu=1,gres/gpu:1g.23gb=7,gres/gpu:3g.93gb=2"
    )
    account = SlurmAccount("optics", "root", 2, ("optics",), shares=1, mig_limits=SLICES)
    (modify,) = [c for c in sacctmgr_account_commands([account]) if "modify" in c]
    assert "GrpTRES=gres/gpu=2,gres/gpu:1g.23gb=7,gres/gpu:3g.93gb=2" in modify
    script = render_account_script([account], [DepartmentQos("optics", 1, SLICES)])
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:1g.23gb,gres/gpu:3g.93gb\n" in script
    assert accounting_storage_tres(["3g.93gb", "1g.23gb+me", "1g.23gb"]) == (
        "gres/gpu,gres/gpu:1g.23gb,gres/gpu:3g.93gb"
    )
    with pytest.raises(ValueError, match="not a MIG profile"):
        sacctmgr_qos_commands(DepartmentQos("optics", 1, (("1g.23gb,gres/gpu=99", 1),)))


def test_the_rest_bodies_carry_the_typed_limits_and_clear_those_no_longer_wanted():
    live = (("2g.47gb", 3),)  # a profile the fleet no longer offers
    assert qos_body(DepartmentQos("optics", 1, SLICES), live)["limits"]["max"]["tres"]["total"] == [
        {"type": "gres", "name": "gpu", "count": 1},
        {"type": "gres", "name": "gpu:1g.23gb", "count": 7},
        {"type": "gres", "name": "gpu:3g.93gb", "count": 2},
        {"type": "gres", "name": "gpu:2g.47gb", "count": -1},
    ]
    account = SlurmAccount("optics", "root", 2, ("optics",), shares=1, mig_limits=SLICES)
    assert [
        t["name"] for t in new_account_body(account, "c1")["association_condition"]["association"]["grptres"]
    ] == ["gpu", "gpu:1g.23gb", "gpu:3g.93gb"]
    tres = [
        {"type": "gres", "name": "gpu", "count": 2},
        {"type": "gres", "name": "gpu:1g.23gb", "count": 7},
    ]
    live_account = {
        "parent_account": "root",
        "qos": ["optics"],
        "default": {"qos": "optics"},
        "shares_raw": 1,
    }
    assert account_differs(account, {**live_account, "max": {"tres": {"total": tres}}}) == [
        "GrpTRES gres/gpu=2,gres/gpu:1g.23gb=7 -> gres/gpu=2,gres/gpu:1g.23gb=7,gres/gpu:3g.93gb=2"
    ]
    tres.append({"type": "gres", "name": "gpu:3g.93gb", "count": 2})
    assert account_differs(account, {**live_account, "max": {"tres": {"total": tres}}}) == []


@pytest.mark.django_db
def test_the_departments_limits_count_the_fleets_mig_slices_in_gpu_equivalents(demo_inventory):
    from tenancy.projects import create_project

    mig_tray("gb-r03-t02")  # all-balanced: 8 x 1g.23gb, 4 x 2g.47gb, 4 x 3g.93gb
    optics = make_department("Optics", slug="optics", guaranteed_gpus=1, limit_gpus=2)
    create_project(make_user("admin", staff=True), optics, name="Lens", slug="lens", guaranteed_gpus=0)
    state = build_state()
    own, borrowed = state.qos
    # The guarantee of 1 GPU: 7 one-slice devices, 3 two-slice, 2 three-slice (floor(7 / g)), each at most
    # what the fleet has; the borrowed QOS has no limit of its own.
    assert own.mig_limits == (("1g.23gb", 7), ("2g.47gb", 3), ("3g.93gb", 2))
    # Slurm counts each MIG device as one gres/gpu too: the generic limit makes room for the slices.
    assert own.gpu_limit == 1 + 7 + 3 + 2
    assert (borrowed.gpu_limit, borrowed.mig_limits) == (None, ())
    department, project = slurm_accounts(state)
    assert department.mig_limits == (("1g.23gb", 8), ("2g.47gb", 4), ("3g.93gb", 4))  # the limit, 2 GPUs
    assert department.gpu_limit == 2 + 16
    assert (project.gpu_limit, project.mig_limits) == (None, ())  # no limit of its own
    # Without MIG in the fleet, the limits are as before.
    ComputeTray.objects.update(mig_layout="", mig_layout_devices={})
    plain = build_state()
    assert [(q.gpu_limit, q.mig_limits) for q in plain.qos] == [(1, ()), (None, ())]
    assert slurm_accounts(plain)[0].gpu_limit == 2
