"""A push's reason and log in the viewer's language (the second walkthrough, Japanese: the demo's pushes read
"department research added; alice in department research added; POSIX account of alice added; ... and 16
more" and the fabric push's log "step 1/3 done: remove 72 GPUs from the default partition ...", while plan
pushes and the wizard's preview were translated). The tenancy changes' reasons and the fabric's steps are
written from templates (integrations.words) and read back on the push list and a push's page; stored in
English."""

from __future__ import annotations

import re

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import translation

from core.moments import stamp
from core.sentences import say
from core.sentences_i18n import translate
from integrations import signals, words
from integrations.fabric import base as fabric
from integrations.models import ConfigPush
from tenancy.models import PosixAccount
from tests.factories import make_department, make_member
from tests.i18n_check import assert_japanese, shown_text

pytestmark = pytest.mark.django_db
JA = {"HTTP_ACCEPT_LANGUAGE": "ja"}


@pytest.fixture
def tenancy_push(demo_inventory, local_target, django_capture_on_commit_callbacks) -> ConfigPush:
    """One push for a department, its member and the member's POSIX account, made in one transaction."""
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        research = make_department("Research", guaranteed_gpus=8)
        alice = make_member("alice", research, posix=False)
        PosixAccount.objects.create(user=alice, name="alice", uid=61234, gid=61234)
    return ConfigPush.objects.latest("pk")


def test_a_tenancy_push_reason_is_stored_english_and_shown_japanese(client_as, platform_admin, tenancy_push):
    assert tenancy_push.reason == (
        "department research added; alice in department research added; POSIX account of alice added"
    )
    admin = client_as(platform_admin)
    for url in (
        reverse("integrations:push-list"),
        reverse("integrations:push-detail", args=[tenancy_push.pk]),
    ):
        shown = shown_text(assert_japanese(admin, url))
        assert "部門 research を追加" in shown and "部門 research の alice を追加" in shown, url
        assert "alice の POSIX アカウントを追加" in shown, url
    english = admin.get(reverse("integrations:push-list")).content.decode()
    assert "department research added; alice in department research added" in shown_text(english)


def test_a_reason_cut_short_says_how_many_more_in_japanese():
    reasons = [
        say(words.CHANGE_ADDED, changed=say(words.CHANGED_DEPARTMENT, department=f"team{n:02d}"))
        for n in range(30)
    ]
    reason = signals._reason(reasons)
    assert reason.endswith(" more") and len(reason) <= signals.REASON_LENGTH
    with translation.override("ja"):
        shown = translate(reason)
    assert shown.startswith("部門 team00 を追加") and re.search(r"ほか \d+ 件$", shown), shown


def test_a_fabric_push_log_reads_its_steps_in_japanese(client_as, platform_admin, tenancy_push):
    step = fabric.FabricStep("shrink", "default", 32766, members=(), removed=tuple(str(n) for n in range(72)))
    done = say(words.RACK_STEP_DONE, rack="gb-r02", count=1, total=3, step=step.describe())
    assert done == "gb-r02: step 1/3 done: remove 72 GPUs from the default partition (ID 32766), 0 stay"
    ConfigPush.objects.filter(pk=tenancy_push.pk).update(log=f"{stamp(tenancy_push.created_at)} {done}\n")
    html = assert_japanese(
        client_as(platform_admin), reverse("integrations:push-detail", args=[tenancy_push.pk])
    )
    assert "手順 1/3 完了: " in shown_text(html) and "default" in shown_text(html)
    assert "remove 72 GPUs" not in html


def test_a_changed_guarantee_and_an_unchanged_push_read_in_japanese(
    client_as, platform_admin, tenancy_push, django_capture_on_commit_callbacks
):
    """A change of fields ("project research/llm-pretrain: guarantee 64 -> 16") and an unchanged push's log
    ("unchanged: ...; nothing sent", once shown half English with a Japanese full stop inside) are read
    back whole; the fabric target's description and payload too. Stored in English."""
    from tenancy.models import Department

    research = Department.objects.get(slug="research")
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        research.guaranteed_gpus = 16
        research.limit_gpus = None
        research.save()
    push = ConfigPush.objects.latest("pk")
    assert push.reason.startswith("department research: guarantee 8 -> 16"), push.reason
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        signals.request_push(push.reason)  # the same configuration again: nothing to send
    unchanged = ConfigPush.objects.latest("pk")
    assert (
        "unchanged: the target's last successful push has the same configuration; nothing sent"
        in unchanged.log
    )
    admin = client_as(platform_admin)
    listed = shown_text(assert_japanese(admin, reverse("integrations:push-list")))
    assert "部門 research: 保証 8 → 16" in listed, listed
    page = shown_text(assert_japanese(admin, reverse("integrations:push-detail", args=[unchanged.pk])))
    assert "変更なし: 配信先の最後に成功した配信と同じ設定です。何も送信していません" in page, page
    assert "依頼: 部門 research: 保証 8 → 16" in page, page


def test_the_fabric_targets_description_and_payload_read_in_japanese():
    from integrations import registry

    fabric_kind = registry.get("fabric")
    payload = {"racks": [{"partitions": [1, 2]}, {"partitions": [3]}]}
    assert fabric_kind.summary({"kind": "simulated"}) == "simulated fabric (in memory, this process)"
    assert fabric_kind.describe(payload) == ["2 racks, 3 NVLink partitions"]
    with translation.override("ja"):
        assert (
            fabric_kind.summary({"kind": "simulated"})
            == "シミュレーションのファブリック（メモリ上、このプロセス内）"  # noqa: RUF001
        )
        assert fabric_kind.describe(payload) == ["2 ラック、3 NVLink パーティション"]
