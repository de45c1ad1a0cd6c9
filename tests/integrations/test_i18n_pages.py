"""Integrations' pages in Japanese (issue 31): the configuration pushes and targets, the partition wizard from
picking a rack to following a plan, the tray actions' result, a department's settings and a job's logs. Each
GET with Accept-Language ja shows no English wording (tests.i18n_check); messages and form errors come back in
Japanese too, and English stays the default.

The list pages include the project's shared table partials (templates/_table_tools.html, _pager.html, the
sort links' titles from core.tables), which are not this app's: `assert_japanese_here` leaves exactly those
strings to their owners' tests and checks everything else on the page."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.urls import reverse

from integrations.dispatch import dispatch
from integrations.models import ConfigPush, PushStatus
from integrations.plans import service as plans
from integrations.plans.forms import current_layout
from integrations.pushes import queue_pushes
from integrations.slurm import versions as slurm_versions
from inventory.models import Rack
from inventory.planning import check_plan, preset_layout
from tenancy.models import Department
from tests.factories import make_job
from tests.i18n_check import assert_japanese, english_left

JA = {"HTTP_ACCEPT_LANGUAGE": "ja"}
FREE_RACK = "gb-r03"  # demo_inventory: gb-r01 one partition with a drained tray, gb-r02 carved 2x9, gb-r03


def url(view, /, *args, **params) -> str:
    query = urlencode(params, doseq=True)
    return reverse(f"integrations:{view}", args=args) + (f"?{query}" if query else "")


def assert_japanese_here(client, path: str, planning: set[str] = frozenset()) -> str:
    """assert_japanese for a page that shows the findings of inventory.planning (a pure module: its
    sentences are English until helper ja-stored translates them, `planning_sentences`; ja-stored): every
    English text left must be one of those. The shared table partials are translated: nothing of theirs is
    let through (an allow-list of them hid nothing but would hide their regression)."""
    response = client.get(path, **JA)
    assert response.status_code == 200, (path, response.status_code)
    assert response.headers["Content-Language"] == "ja"
    html = response.content.decode()
    left = [
        text
        for text in english_left(html)
        if not any(sentence in text for sentence in planning)  # ja-stored
    ]
    assert not left, f"{path} in Japanese still shows English: {left}"
    return html


def planning_sentences(rack_name: str, partitions=None, drain: bool = False) -> set[str]:
    """The findings inventory.planning.check_plan itself makes for this plan (the rack as it is when
    `partitions` is None), as integrations.plans.service.check asks it."""
    rack = Rack.objects.get(name=rack_name)
    if partitions is None:
        partitions = current_layout(rack).partitions
    result = check_plan(
        rack.name,
        plans.rack_trays(rack),
        partitions,
        departments=Department.objects.values_list("slug", flat=True),
        drain=drain,
        check_blocks=plans._block_checker(rack),
    )
    return {finding.message for finding in result.findings}


@pytest.fixture
def admin(client_as, platform_admin, demo_inventory):
    return client_as(platform_admin)


def push_now(capture, target) -> ConfigPush:
    """One push of the current configuration to `target`, run to its end (the task runs on commit)."""
    with capture(execute=True):
        [push] = queue_pushes(reason="pushed from the portal", targets=[target])
    push.refresh_from_db()
    return push


@pytest.fixture
def pushed(local_target, django_capture_on_commit_callbacks):
    return push_now(django_capture_on_commit_callbacks, local_target)


# --- configuration pushes and targets ----------------------------------------------------------------------


def test_the_push_pages_are_japanese(admin, pushed):
    assert pushed.status == PushStatus.SUCCEEDED
    html = assert_japanese_here(admin, url("push-list"))
    assert "設定の配信" in html and "成功" in html
    html = assert_japanese(admin, url("push-detail", pushed.pk))
    assert "成功: 配信先はこの設定で動いています。" in html
    html = assert_japanese(admin, url("push-list", status="failed"))  # the empty state of a filter
    assert "絞り込み条件に一致する配信はありません。" in html


def test_a_second_push_says_it_sent_nothing_new_in_japanese(
    admin, pushed, local_target, django_capture_on_commit_callbacks
):
    second = push_now(django_capture_on_commit_callbacks, local_target)
    html = assert_japanese(admin, url("push-detail", second.pk))
    assert "何も送信せずに成功しました" in html


def test_the_push_list_is_japanese_before_any_push(admin, local_target):
    ConfigPush.objects.all().delete()
    html = assert_japanese(admin, url("push-list"))
    assert "まだ配信はありません" in html


def test_the_target_pages_are_japanese(admin, local_target):
    html = assert_japanese(admin, url("target-list"))
    assert "設定の配信先" in html and "接続テスト" in html
    assert "配信先の種類: ディレクトリ（レンダリング済みファイル）、Slurm コントローラー、" in html  # noqa: RUF001
    for kind in ("directory", "slurm", "kubernetes", "fabric"):
        html = assert_japanese(admin, url("target-create", kind=kind))
        assert "新しい設定の配信先" in html
    assert_japanese(admin, url("target-edit", local_target.pk))


def slurm_version_sentences() -> set[str]:
    """integrations.slurm.versions is pure (no Django): its removals' and uses' sentences stay English."""
    sentences = {words for _key, words in slurm_versions.VERSION_FACTS}
    for removal in slurm_versions.REMOVALS:
        sentences |= {removal.what, removal.deprecated_in, removal.removed_in, removal.what_to_do[1:]}
    return sentences


def test_the_versions_page_is_japanese(admin, local_target):
    html = assert_japanese_here(admin, url("versions"), slurm_version_sentences())
    assert "バージョンと削除予定" in html and "Rackplane が監視している廃止予定" in html
    assert "日付なし" in html  # the Kubernetes and fabric removals are not dated
    assert "NMX-M のパーティションのパス（/nmx/v1 配下）" in html  # a removal marked in the fabric's folder  # noqa: RUF001


def test_a_target_form_error_and_a_save_message_are_japanese(admin, local_target):
    refused = admin.post(url("target-create"), {"name": local_target.name, "kind": "directory"}, **JA)
    assert refused.status_code == 400
    html = refused.content.decode()
    assert f"{local_target.name} という名前の配信先はすでに存在します。" in html
    assert not english_left(html), english_left(html)

    saved = admin.post(url("target-create"), {"name": "files-2", "kind": "directory"}, follow=True, **JA)
    assert "配信先 files-2 を保存しました。" in saved.content.decode()


def test_a_connection_test_answers_in_japanese(admin, local_target):
    response = admin.post(url("target-test", local_target.pk), HTTP_HX_REQUEST="true", **JA)
    html = response.content.decode()
    assert "接続できます。" in html and "local の応答" in html


def test_english_stays_the_default(admin, pushed):
    html = admin.get(url("push-list")).content.decode()
    assert "Config pushes" in html and "Succeeded" in html and "設定の配信" not in html
    html = admin.get(url("target-create", kind="slurm")).content.decode()
    assert "Config directory" in html and "設定ディレクトリ" not in html


# --- the partition wizard ----------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_wizard_steps_are_japanese(admin):
    html = assert_japanese_here(admin, url("plan-new"))
    assert "NVLink パーティションを分割" in html
    html = assert_japanese_here(admin, url("plan-layout", FREE_RACK), planning_sentences(FREE_RACK))
    assert "これは現在の gb-r03 の分割です" in html  # the rack as it is: said as information
    two = planning_sentences(FREE_RACK, preset_layout("2x9"))
    html = assert_japanese_here(
        admin, url("plan-layout", FREE_RACK, preset="custom", slots=["1-9", "10-18"]), two
    )
    assert "トレイ範囲を指定" in html and "パーティションを追加" in html
    assert_japanese_here(admin, url("plan-names", FREE_RACK, preset="2x9"), two)
    html = assert_japanese_here(admin, url("plan-preview", FREE_RACK, preset="2x9"), two)
    assert "計画を適用" in html and "4. チェック" in html


def test_a_plan_is_followed_in_japanese(admin, platform_admin, local_target):
    rack = Rack.objects.get(name=FREE_RACK)
    plan = plans.create_and_apply(rack, preset_layout("2x9"), drain=False, user=platform_admin)
    html = assert_japanese(admin, url("plan-detail", plan.pk))  # its stored findings are data
    assert f"計画 #{plan.pk}" in html
    html = assert_japanese_here(admin, url("plan-list"))
    assert "パーティション計画" in html


def test_a_refused_apply_says_what_to_do_in_japanese(admin):
    response = admin.post(url("plan-apply", FREE_RACK), {"preset": "custom", "slots": [""]}, **JA)
    assert response.status_code == 400
    html = response.content.decode()
    assert "計画は適用されませんでした。" in html
    assert "計画にエラーがあります。レイアウトに戻って修正してください。" in html
    assert not english_left(html), english_left(html)


def test_a_what_if_form_error_is_japanese(admin):
    response = admin.post(
        url("plan-whatif", FREE_RACK), {"preset": "2x9", "days": "abc"}, HTTP_HX_REQUEST="true", **JA
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "日数は整数で入力してください（例: 7）。" in html  # noqa: RUF001
    assert not english_left(html), english_left(html)


def test_the_wizard_stays_english_by_default(admin):
    html = admin.get(url("plan-preview", FREE_RACK, preset="2x9")).content.decode()
    assert "Apply plan" in html and "計画を適用" not in html


# --- tray actions, department settings ------------------------------------------------------------------


def test_the_tray_action_result_is_japanese(admin):
    html = assert_japanese(admin, url("tray-bulk-result", FREE_RACK))
    assert "表示する最近のトレイ操作はありません。" in html


def test_the_department_settings_page_says_its_own_words_in_japanese(admin, department_a):
    """The fields are tenancy's form in scheduling's partial (their owners' catalogues); this page's own
    words are integrations'."""
    response = admin.get(url("department-edit", department_a.slug), **JA)
    html = response.content.decode()
    assert "部門を保存" in html and f"{department_a.name} を編集" in html
    assert "保証はスケジュール可能な正常 GPU の数に収める必要があります" in html


# --- a job's logs: the people who see the job --------------------------------------------------------------


@pytest.fixture
def job(department_a, demo_inventory):
    """A job handed to the embedded backend (no target enabled): its rendered request, nothing ran."""
    job = make_job(
        department_a,
        "logs",
        state="starting",
        trays=["gb-r02-t05"],
        work={"script": "#!/bin/bash\necho hi\n"},
    )
    outcome = dispatch(job.pk)
    job.refresh_from_db()
    assert outcome == "submitted", job.backend_message
    return job


@pytest.mark.parametrize("persona", ["member_a", "lead_a", "platform_admin"])
def test_a_jobs_logs_are_japanese_for_whoever_sees_the_job(client_as, persona, job):
    html = assert_japanese(client_as(persona), url("job-logs", job.pk))
    assert "ログ" in html and "組み込みバックエンド" in html
