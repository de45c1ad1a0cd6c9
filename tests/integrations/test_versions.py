"""Versions and removals (integrations.versions, integrations.removals): the rules over a target's facts,
the admins' page and banner, and the one notification per target and removal. The facts are what Test
connection reads from real servers (tests/integrations/kubernetes/test_target_check.py, the Slurm and
fabric checks); here they are written as those checks write them."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.urls import reverse

from core.models import InboxItem, NotificationChannel, NotificationSubscription
from integrations import registry, removals, versions
from integrations.models import ConfigTarget

TODAY = date(2026, 11, 29)
OLD_KUEUE = {
    "kubernetes_version": "v1.33.2",
    "kueue_versions": ["v1beta1"],
    "compute_domain_versions": ["v1beta1"],
}
NEW_KUEUE = {**OLD_KUEUE, "kueue_versions": ["v1beta2", "v1beta1"]}


def keys(touches) -> dict[str, tuple[bool, bool]]:
    return {t.removal.key: (t.needs_action, t.bites) for t in touches}


def touches(kind: str, facts: dict):
    return versions.touches(registry.get(kind).removals, facts, TODAY)


# --- the rules --------------------------------------------------------------------------------------------


def test_a_cluster_without_kueue_v1beta2_needs_action_now_and_one_with_it_is_handled():
    assert keys(touches("kubernetes", OLD_KUEUE)) == {
        "kueue-v1beta1": (True, True),  # Rackplane writes v1beta2: nothing of its queues applies here
        "computedomain-numnodes": (False, False),
    }
    assert keys(touches("kubernetes", NEW_KUEUE))["kueue-v1beta1"] == (False, False)
    # A removal is about one kind of target, and only about what the target's facts show it uses.
    assert touches("slurm", OLD_KUEUE) == []
    assert touches("kubernetes", {}) == []


def test_slurm_rest_v0_0_42_and_the_nmx_v1_path_are_shown_but_rackplane_moves_by_itself():
    assert keys(touches("slurm", {"slurm_rest": "v0.0.42"})) == {"slurm-rest-v0.0.42": (False, False)}
    assert touches("slurm", {"slurm_rest": "v0.0.44"}) == []
    assert keys(touches("fabric", {"nmx_api": "/nmx/v1"})) == {"nmx-v1-path": (False, False)}
    assert touches("fabric", {"nmx_api": "/v1"}) == []


@pytest.mark.parametrize(
    ("days", "bites"),
    [(versions.LEAD_DAYS + 1, False), (versions.LEAD_DAYS, True), (0, True), (-30, True)],
)
def test_a_dated_removal_that_needs_action_bites_from_lead_days_before_its_release(days, bites):
    removal = versions.Removal(
        key="x",
        what="x",
        deprecated_in="a",
        removed_in="b",
        due=TODAY + timedelta(days=days),
        touches=lambda facts: True,
        handled=lambda facts: False,
        what_to_do="upgrade",
        source="test",
    )
    assert removal.bites_by({}, TODAY) is bites
    handled = versions.Removal(**{**removal.__dict__, "handled": lambda facts: True})
    assert handled.bites_by({}, TODAY) is False


def test_every_removal_has_its_source_and_what_to_do():
    table = [removal for kind in registry.kinds() for removal in kind.removals]
    assert len({r.key for r in table}) == len(table) >= 4
    for removal in table:
        assert removal.source and removal.what_to_do and removal.removed_in and removal.deprecated_in


# --- the page, the banner and the notification -------------------------------------------------------------


@pytest.fixture
def targets(db):
    old = ConfigTarget.objects.create(name="old-cluster", kind="kubernetes", settings={}, facts=OLD_KUEUE)
    ConfigTarget.objects.create(
        name="hpc", kind="slurm", settings={}, facts={"slurm_version": "24.11.5", "slurm_rest": "v0.0.42"}
    )
    ConfigTarget.objects.create(name="nvlink", kind="fabric", settings={"kind": "nmx"}, facts={})
    ConfigTarget.objects.get_or_create(name="local", defaults={"kind": "directory", "settings": {}})
    return old


def test_the_page_shows_what_each_target_runs_uses_and_what_is_removed(targets, client_as, platform_admin):
    response = client_as(platform_admin).get(reverse("integrations:versions"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Kueue APIs served: <code>v1beta1</code>" in html and "Slurm: <code>24.11.5</code>" in html
    assert 'data-removal="kueue-v1beta1" data-action="true"' in html and "act now" in html
    assert 'data-removal="slurm-rest-v0.0.42" data-action="false"' in html
    assert "NMX-M partitions API (its path is found at Test connection)" in html
    assert "not read yet: press Test connection" in html  # the fabric target was never tested
    assert "no versions to read" in html  # a folder of files has none
    for _, removal in removals.all_removals():  # the table, each with its source
        assert removal.source.replace("'", "&#x27;") in html


def test_only_platform_admins_see_the_page_and_a_get_writes_nothing(
    targets, client_as, platform_admin, lead_a, member_a
):
    url = reverse("integrations:versions")
    before = list(ConfigTarget.objects.order_by("pk").values_list("facts", flat=True))
    assert client_as(lead_a).get(url).status_code == 403
    assert client_as(member_a).get(url).status_code == 403
    assert client_as(platform_admin).post(url).status_code == 405
    assert list(ConfigTarget.objects.order_by("pk").values_list("facts", flat=True)) == before


def test_the_banner_shows_admins_what_bites_and_nobody_else(targets, client_as, platform_admin, member_a):
    home = reverse("home")
    html = client_as(platform_admin).get(home).content.decode()
    assert 'class="capacity-banner removals-banner"' in html
    assert "<b>old-cluster</b>: Kueue API kueue.x-k8s.io/v1beta1 is removed in" in html
    assert "slurmrestd API v0.0.42" not in html  # handled by Rackplane: on the page, not in the banner
    assert "removals-banner" not in client_as(member_a).get(home).content.decode()
    # Upgraded (Test connection read the new versions), or disabled: no banner.
    targets.facts = NEW_KUEUE
    targets.save()
    assert "removals-banner" not in client_as(platform_admin).get(home).content.decode()


def test_subscribers_hear_once_per_target_and_again_if_it_comes_back(
    targets, platform_admin, django_capture_on_commit_callbacks
):
    NotificationSubscription.objects.create(
        name="removals", channel=NotificationChannel.PORTAL, events=["removal_ahead"], owner=platform_admin
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert removals.notify_biting(TODAY) == ["old-cluster: kueue-v1beta1"]
        assert removals.notify_biting(TODAY) == []
    [item] = InboxItem.objects.filter(user=platform_admin)
    assert item.subject.startswith("old-cluster: Kueue API kueue.x-k8s.io/v1beta1 is removed in Kueue 0.20")
    assert item.link == reverse("integrations:versions")
    targets.refresh_from_db()
    assert targets.facts["removals_notified"] == ["kueue-v1beta1"]

    # Upgraded: forgotten at the next watch; downgraded again: told again.
    ConfigTarget.objects.filter(pk=targets.pk).update(
        facts={**NEW_KUEUE, "removals_notified": ["kueue-v1beta1"]}
    )
    assert removals.notify_biting(TODAY) == []
    targets.refresh_from_db()
    assert targets.facts["removals_notified"] == []
    ConfigTarget.objects.filter(pk=targets.pk).update(facts={**OLD_KUEUE, "removals_notified": []})
    assert removals.notify_biting(TODAY) == ["old-cluster: kueue-v1beta1"]
    assert InboxItem.objects.filter(user=platform_admin).count() == 2


def test_a_disabled_target_neither_shows_in_the_banner_nor_is_told(targets, platform_admin):
    ConfigTarget.objects.filter(pk=targets.pk).update(enabled=False)
    assert removals.biting(TODAY) == [] and removals.notify_biting(TODAY) == []
