"""Inventory's pages in Japanese: the rack list, the tray and GPU pages, the health centre, service / RMA,
agent tokens and a rack's re-carving policy show no English wording to a viewer whose browser asks for
Japanese (tests.i18n_check), as a platform admin, a department lead and a member; a form's errors, a page's
message and a service's refusal come back in Japanese; and what is kept (reasons, decisions, the audit log)
stays in English whoever asked.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone, translation

from core.models import AuditEvent
from inventory import agent_tokens
from inventory.choices import ServiceStatus, TrayState
from inventory.demo import seed_health_history
from inventory.health.actions import drain_tray
from inventory.health.service import mark_service
from inventory.models import ComputeTray, Gpu, HealthAction, Rack, ServiceRecord
from tenancy.choices import Role
from tests.factories import make_member
from tests.i18n_check import english_left

pytestmark = pytest.mark.django_db

JA = {"HTTP_ACCEPT_LANGUAGE": "ja"}
DRAIN_REASON_REQUIRED = (
    "トレイをドレインする理由を入力してください。オペレーターと Slurm にこの理由が表示されます。"
)


def assert_inventory_japanese(client, url: str) -> str:
    """assert_japanese, every text of the page included: the shared list parts (templates/_table_tools.html,
    _filter_actions.html, _pager.html, core.tables' sort titles) are translated in the project's and
    core's catalogues, so none of their words is let through any more."""
    response = client.get(url, **JA)
    assert response.status_code == 200, (url, response.status_code)
    assert response.headers["Content-Language"] == "ja"
    html = response.content.decode()
    left = english_left(html)
    assert not left, f"{url} in Japanese still shows English: {left}"
    return html


def tray(hostname: str) -> ComputeTray:
    return ComputeTray.objects.select_related("rack").get(hostname=hostname)


@pytest.fixture
def fleet(demo_inventory):
    seed_health_history()
    return demo_inventory


# --- pages everyone signed in sees -------------------------------------------------------------------------


@pytest.fixture
def people(department_a, platform_admin):
    """An admin, a lead and a member, named as Japanese operators are (the personas' names, "lead-a",
    hold English words the checker would find in the header, which shows the name)."""
    return {
        "admin": platform_admin,
        "lead": make_member("tanaka", department_a, Role.LEAD),
        "member": make_member("suzuki", department_a),
    }


@pytest.mark.slow(reason="3 cases, 0.6 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("who", ["admin", "lead", "member"])
def test_rack_list_tray_and_gpu_pages_are_japanese(client, people, who, fleet):
    client.force_login(people[who])
    html = assert_inventory_japanese(client, reverse("inventory:rack-list"))
    assert "ラック" in html
    assert_inventory_japanese(client, reverse("inventory:rack-list") + "?name=no-such-rack")
    for hostname in ("gb-r01-t07", "gb-r02-t01"):  # drained by another owner; up, with its GPUs
        html = assert_inventory_japanese(client, reverse("inventory:tray-detail", args=[tray(hostname).pk]))
        assert "計算トレイ" in html
    gpu = Gpu.objects.filter(tray__hostname="gb-r02-t01").order_by("index").first()
    html = assert_inventory_japanese(client, reverse("inventory:gpu-detail", args=[gpu.pk]))
    assert "ヘルス" in html


def test_the_tray_partial_for_htmx_is_japanese(client_as, fleet):
    client = client_as("platform_admin")
    url = reverse("inventory:tray-detail", args=[tray("gb-r02-t01").pk])
    response = client.get(url, HTTP_HX_REQUEST="true", **JA)
    assert response.status_code == 200
    assert not english_left(response.content.decode())


def test_a_tray_out_for_rackplane_offers_its_return_in_japanese(client_as, fleet, platform_admin):
    out = tray("gb-r02-t03")
    drain_tray(out, "fan swap", actor=platform_admin)
    html = assert_inventory_japanese(
        client_as("platform_admin"), reverse("inventory:tray-detail", args=[out.pk])
    )
    assert "ヘルスルールではなく手動でドレインされ" in html  # the eligibility, in Japanese
    assert "サービスに戻す" in html
    # The kept reason ("rackplane: platform-admin: fan swap"): Rackplane's, what was typed kept as typed.
    assert "Rackplane: platform-admin: fan swap" in re.sub(r"<[^>]+>", "", html)


def test_a_silent_tray_and_a_mig_layout_are_explained_in_japanese(client_as, fleet):
    silent = tray("gb-r02-t04")
    ComputeTray.objects.filter(pk=silent.pk).update(
        last_report_at=timezone.now() - timedelta(days=2),
        agent_version="1.4.0",
        agent_interval_s=30,
        mig_layout="all-1g.23gb",
        mig_layout_devices={"1g.23gb": 7},
    )
    url = reverse("inventory:tray-detail", args=[silent.pk])
    html = assert_inventory_japanese(client_as("platform_admin"), url)
    assert "報告がありません" in html  # silent
    assert "GPU ごとに 7 \u00d7 1g.23gb" in html  # the layout's devices
    assert "all-disabled: MIG オフ（GPU 全体）" in html  # the layouts offered (names are data, summaries not)  # noqa: RUF001
    assert "現在 4 台中 0 台の GPU がこのレイアウトを報告しています" in html  # how far its GPUs show it


# --- the health centre, service / RMA, agent tokens, re-carving (platform admins) --------------------------


def test_health_centre_pages_are_japanese(client_as, fleet, platform_admin):
    client = client_as("platform_admin")
    target = tray("gb-r02-t05")
    mark_service(target, ServiceStatus.RMA, actor=platform_admin, note="RMA 12345")
    assert_inventory_japanese(client, reverse("inventory:health-events"))
    assert_inventory_japanese(client, reverse("inventory:health-events") + "?rack=gb-r02&severity=warn")
    assert_inventory_japanese(client, reverse("inventory:health-events") + "?rack=gb-r99")  # the empty state
    assert_inventory_japanese(client, reverse("inventory:health-offenders"))
    assert_inventory_japanese(client, reverse("inventory:health-offenders") + "?window=7d&rack=gb-r03")
    assert_inventory_japanese(client, reverse("inventory:health-service"))
    html = assert_inventory_japanese(client, reverse("inventory:health-tray-service", args=[target.pk]))
    assert "RMA に送付" in html
    html = assert_inventory_japanese(client, reverse("inventory:tray-detail", args=[target.pk]))
    assert "管理者が返却済みとしてマークするまで" in html


def test_a_filter_the_health_centre_cannot_read_is_refused_in_japanese(client_as, fleet):
    client = client_as("platform_admin")
    response = client.get(reverse("inventory:health-events") + "?gpu=" + "f" * 200 + "&kind=bogus", **JA)
    assert response.status_code == 400
    html = response.content.decode()
    assert "128 文字以下" in html, re.findall(r'role="alert"[^<]*<[^>]*>[^<]*', html)
    assert "bogus は選択肢にありません" in html
    response = client.get(reverse("inventory:health-events") + "?before=x", **JA)
    assert response.status_code == 400
    assert "このページが作成したページリンクではありません" in response.content.decode()


def test_the_service_form_answers_in_japanese(client_as, fleet):
    client = client_as("platform_admin")
    target = tray("gb-r02-t06")
    url = reverse("inventory:health-tray-service", args=[target.pk])
    response = client.post(url, {"status": ServiceStatus.NEEDS_SERVICE, "note": ""}, **JA)
    assert response.status_code == 400
    html = response.content.decode()
    assert "問題の内容を入力してください" in html
    assert not english_left(html)
    # A step the tray's mark does not allow: refused (409) by the service, in Japanese, nothing written.
    response = client.post(url, {"status": ServiceStatus.RETURNED, "note": "fixed"}, **JA)
    assert response.status_code == 409
    assert "未完了の修理マークがありません" in response.content.decode()
    assert not ServiceRecord.objects.filter(tray=target).exists()
    # Recorded: the message says so in Japanese; the tray's kept reason stays English.
    response = client.post(
        url, {"status": ServiceStatus.NEEDS_SERVICE, "note": "fan noise"}, follow=True, **JA
    )
    assert "サービスから離脱します" in response.content.decode()
    target.refresh_from_db()
    assert target.state == TrayState.NEEDS_SERVICE
    assert target.state_reason == "rackplane: needs service: platform-admin: needs service: fan noise"


def test_agent_token_pages_and_errors_are_japanese(client_as, fleet, platform_admin):
    client = client_as("platform_admin")
    url = reverse("inventory:agent-token-list")
    assert_inventory_japanese(client, url)
    response = client.post(url, {"rack": "", "hostname": ""}, **JA)
    assert response.status_code == 400
    assert "ラックを選ぶか、ホストを入力してください" in response.content.decode()
    assert not english_left(response.content.decode())
    response = client.post(url, {"rack": "gb-r01", "description": "aggregator"}, **JA)
    assert response.status_code == 303
    html = assert_inventory_japanese(client, response["Location"])
    assert "今すぐシークレットをコピーしてください" in html
    html = assert_inventory_japanese(client, response["Location"])  # shown once: now the note
    assert "一度だけ表示されました" in html
    token = Rack.objects.get(name="gb-r01").agent_tokens.get()
    assert_inventory_japanese(client, reverse("inventory:agent-token-revoke", args=[token.pk]))
    response = client.post(reverse("inventory:agent-token-revoke", args=[token.pk]), follow=True, **JA)
    assert "ラック gb-r01 のエージェントトークン" in response.content.decode()
    assert_inventory_japanese(client, reverse("inventory:agent-token-revoke", args=[token.pk]))  # revoked
    host_token, _ = agent_tokens.issue(hostname="gb-r02-t01")
    assert_inventory_japanese(client, reverse("inventory:agent-token-issued", args=[host_token.pk]))


def test_recarve_policy_page_and_its_errors_are_japanese(client_as, fleet):
    client = client_as("platform_admin")
    url = reverse("inventory:recarve-policy", args=["gb-r03"])
    assert_inventory_japanese(client, url)
    response = client.post(url, {"enabled": "on", "smallest_trays": "0", "max_per_hour": "2"}, **JA)
    assert response.status_code == 400
    assert not english_left(response.content.decode())
    response = client.post(
        url, {"enabled": "on", "smallest_trays": "2", "max_per_hour": "1"}, follow=True, **JA
    )
    assert "gb-r03 の再分割はオンです" in response.content.decode()


def test_tray_action_form_errors_are_japanese(client_as, fleet):
    """The drain and maintenance forms (inventory.views.tray_forms), bound and refused, in Japanese."""
    from inventory.views.tray_forms import DrainForm, MaintenanceForm

    with translation.override("ja"):
        drain = DrainForm({"drain-reason": ""}, prefix="drain")
        assert not drain.is_valid()
        assert drain.errors["reason"] == [DRAIN_REASON_REQUIRED]
        maintenance = MaintenanceForm(
            {"m-reason": "fan", "m-start": "2026-01-01T10:00", "m-end": ""}, prefix="m"
        )
        assert not maintenance.is_valid()
        assert "メンテナンス期間の開始と終了を両方とも指定するか" in str(maintenance.errors)


# --- what is kept stays English ----------------------------------------------------------------------------


def test_what_is_kept_stays_english_whoever_asked(fleet, platform_admin):
    target = tray("gb-r02-t08")
    with translation.override("ja"):
        outcome = mark_service(target, ServiceStatus.RMA, actor=platform_admin, note="sent to vendor")
        action = HealthAction.objects.filter(tray=target).latest("pk")
        assert str(outcome.record).startswith("RMA に送付: ")  # shown in the viewer's language
    audited = AuditEvent.objects.get(object_type="inventory.servicerecord", object_id=str(outcome.record.pk))
    assert audited.object_repr.startswith("Sent for RMA: ")  # the audit log keeps English (core.audit)
    target.refresh_from_db()
    assert target.state_reason == "rackplane: needs service: platform-admin: sent for RMA: sent to vendor"
    assert action.reason == target.state_reason


def test_english_stays_the_default(client_as, fleet):
    client = client_as("platform_admin")
    html = client.get(reverse("inventory:health-service")).content.decode()
    assert "Out for service" in html and "修理" not in html
    html = client.get(reverse("inventory:tray-detail", args=[tray("gb-r01-t07").pk])).content.decode()
    assert "Compute tray" in html and "Return to service" in html


def test_a_fabric_health_problem_reads_its_health_in_the_viewers_language():
    """The walkthrough's home page: "GPU 2 (...) のファブリックヘルスは Unhealthy です". The problem is
    stored as the API sends it (nvidia-smi's word); a page reads the health as the GPU's health column
    labels it."""
    from core.sentences_i18n import translate_html
    from inventory.choices import GpuHealth
    from inventory.discovery.nvidia_smi import FABRIC_HEALTH, HEALTH_WORDS

    for health, word in HEALTH_WORDS.items():
        stored = FABRIC_HEALTH % {"gpu": "GPU 2 (GPU-f3aed0b6-c7ac-4491-9ef8-8334e647cb8f)", "health": word}
        with translation.override("ja"):
            shown = re.sub(r"<[^>]+>", "", translate_html(stored))
            assert shown.endswith(f"のファブリックヘルスは{GpuHealth(health).label}です"), shown
            assert word not in shown
        with translation.override("en"):
            assert re.sub(r"<[^>]+>", "", translate_html(stored)) == stored  # English: as stored
