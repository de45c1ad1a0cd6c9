"""Sentences stored in English and shown in the viewer's language (core.sentences, core.sentences_i18n): a
tray drained for a plan, a push's reason, a plan's error, the wizard's fabric-manager steps, a node report's
problems, the names rule, Slurm's block rule and the what-if's notes. The database, the API and Slurm keep
the English; a Japanese page reads each back through its registered template, its names marked as data; what
an outside system wrote is shown as written."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import translation

from core import blocks, sentences_i18n
from core.sentences import CLAUSES, TEMPLATES, say
from core.templatetags.rackplane import sentence_html
from integrations import words
from integrations.fabric import base as fabric
from integrations.models import ConfigPush
from integrations.plans import service as plans
from integrations.plans import windows
from inventory import names
from inventory.choices import GpuHealth, TrayState
from inventory.discovery import nvidia_smi
from inventory.discovery.nvidia_smi import FabricState, ReportedGpu, summarize
from inventory.ingest import gpus as ingest_gpus
from inventory.ingest import reports as ingest_reports
from inventory.models import ComputeTray, Rack
from inventory.planning import preset_layout
from inventory.validators import validate_hostname, validate_rack_name
from scheduling import whatif
from tests.factories import make_department, run_job
from tests.i18n_check import assert_japanese, english_left

JA = {"HTTP_ACCEPT_LANGUAGE": "ja"}
FREE_RACK = "gb-r03"  # demo_inventory: wholly free
MODULES = (words, fabric, windows, nvidia_smi, ingest_gpus, ingest_reports, names, blocks, whatif)


def _templates_of(module) -> list[str]:
    """The templates a module defines (its module-level constants that are registered templates, and the
    fabric's step words)."""
    registered = set(TEMPLATES)
    found = [value for value in vars(module).values() if isinstance(value, str) and value in registered]
    if module is fabric:
        found += list(fabric.STEP_WORDS.values())
    return list(dict.fromkeys(found))


ADDED = [template for module in MODULES for template in _templates_of(module)]


SHAPED = {
    "gpu": "GPU 3 (GPU-0f)",
    "gpu_list": "GPU 0-2, 5",
    "preset": "2x9",
    "domain": "5e3b.7",
    "backend": "Slurm (prod)",
    "backend_state": "running",
    "code": "3",
    "changed": "department research",
    "field_changes": "guarantee 64 -> 16",
    "changed_field": "guarantee",
    "old_value": "64",
    "new_value": "16",
}


def _sample(name: str) -> str:
    """A value of the kind the placeholder holds (core.sentences_i18n's value classes)."""
    if name in sentences_i18n.MOMENTS:
        return "2026-11-30 01:02:03 UTC"  # core.moments.utc_words
    if name in sentences_i18n.SHAPES:
        return SHAPED[name]
    if name in sentences_i18n.NUMBERS:
        return "3"
    if name in sentences_i18n.IDENTIFIERS:
        return "gb-r01"
    if name in sentences_i18n.COUNTED:
        return "4 racks"
    return "GPU-0f"


def test_every_area_registers_its_templates():
    assert len(ADDED) >= 70
    for module in MODULES:
        assert _templates_of(module), module.__name__


@pytest.mark.parametrize("template", ADDED)
def test_each_template_reads_back_in_japanese_and_stays_english_for_english_viewers(template):
    """Written with sample values, the sentence is found again and shown in Japanese with no English word
    left (the values are no words), and English viewers get it as written."""
    values = {name: _sample(name) for name in sentences_i18n.PLACEHOLDER.findall(template)}
    text = say(template, **values)
    with translation.override("en"):
        assert sentences_i18n.translate(text) == text
    with translation.override("ja"):
        shown = sentences_i18n.translate(text)
    assert shown != text
    assert not english_left(f"<p>{shown}</p>"), (text, shown)
    # A count in words, a state, what a change touched and its fields: templates.
    read = {
        "4 racks": "ラック 4 台",
        "running": "実行中",
        "department research": "部門 research",
        "guarantee 64 -> 16": "保証 64 → 16",
        "guarantee": "保証",
    }
    for value in values.values():  # names and numbers as written
        assert read.get(value, value) in shown, (text, shown)


def test_a_short_template_is_not_taken_for_someone_elses_sentence():
    """Templates of few words match only values of their shape: an outside system's "node reports bad
    memory" or "drain as requested" stays as written."""
    with translation.override("ja"):
        for text in ("node reports bad memory", "drain as requested", "GPU 0-3 report ok"):
            assert sentences_i18n.translate(text) == text
        assert sentences_i18n.translate("GPU 0-3 report 5e3b.7") == "GPU 0-3 は 5e3b.7 を報告"


def test_the_html_read_back_marks_names_and_outside_words_as_data_and_escapes_them():
    with translation.override("ja"):
        step = str(sentence_html(say(fabric.STEP_WORDS["create"], name="p<1>", gpu_words="36 GPUs")))
        slurm = str(sentence_html("XID 79 (GPU fell off the bus) on GPU 2; awaiting <RMA>"))
        mixed = str(sentence_html(CLAUSES.join([say(words.PUSH_RETRY, push=4), "kept <as> written"])))
    assert step == 'パーティション <span translate="no">p&lt;1&gt;</span> を作成: GPU 36 基'
    # An outside system's reason matches no template: shown whole, "; " and all, marked as data.
    assert slurm == '<span translate="no">XID 79 (GPU fell off the bus) on GPU 2; awaiting &lt;RMA&gt;</span>'
    assert (
        mixed.startswith("配信 #4 の再試行")
        and '<span translate="no">kept &lt;as&gt; written</span>' in mixed
    )
    with translation.override("en"):
        english = str(sentence_html(say(fabric.STEP_WORDS["create"], name="p1", gpu_words="36 GPUs")))
    assert english == 'create partition <span translate="no">p1</span>: 36 GPUs'


def test_the_names_rule_refuses_in_the_askers_language():
    with translation.override("en"), pytest.raises(ValidationError) as english:
        validate_rack_name("Rack 1")
    assert english.value.messages == [
        "use lower case: it is a Kubernetes label value and part of Slurm block names"
    ]
    with translation.override("ja"), pytest.raises(ValidationError) as japanese:
        validate_hostname("x" * 64)
    assert japanese.value.messages == [
        "63 文字以内にしてください（この名前は 64 文字です）: "  # noqa: RUF001
        "Kubernetes のノード名とラベル値、および Slurm の NodeName になります"
    ]
    # The rule itself stays English (the node-report API, the migration's refusal).
    assert names.hostname_error("x" * 64).startswith("at most 63 characters (this one has 64)")


def test_slurms_block_rule_reads_back_whole():
    """Both refusals: a size the rule cannot take, and blocks Slurm would group across racks (two clauses: a
    template holds no "; "), their values names, numbers and racks."""
    sizes = [blocks.BlockPartition("r1", "a", 6), blocks.BlockPartition("r2", "b", 9)]
    grouped = [
        blocks.BlockPartition(rack, name, nodes)
        for rack, name, nodes in (("r1", "a", 16), ("r1", "c", 2), ("r2", "b", 16), ("r2", "d", 2))
    ]
    for layout, start in (
        (sizes, "Slurm 24.11 は NVLink パーティション b（9 ノード）"),  # noqa: RUF001
        (grouped, "Slurm 24.11 は"),
    ):
        with pytest.raises(ValueError) as refused:
            blocks.block_layout(layout)
        message = str(refused.value)
        assert message.startswith("Slurm 24.11 cannot express")
        with translation.override("ja"):
            shown = sentences_i18n.translate(message)
        assert shown.startswith(start) and not english_left(f"<p>{shown}</p>"), shown
    assert "レベル 16 でラック r1, r2 のブロック" in shown


def test_a_node_reports_problems_read_back_with_their_gpus_as_data():
    gpus = [
        ReportedGpu("GPU-00000000-0000-0000-0000-00000000000a", 0, None, None, FabricState.IN_PROGRESS, None,
                    GpuHealth.UNKNOWN),
        ReportedGpu("GPU-00000000-0000-0000-0000-00000000000b", 1, None, None, FabricState.NOT_SUPPORTED,
                    None, GpuHealth.UNKNOWN),
    ]  # fmt: skip
    problems = summarize("gb-r01-t01", "text", gpus).problems
    assert problems == [
        "GPU 0 (GPU-00000000-0000-0000-0000-00000000000a) fabric registration is still in progress",
        "GPU 1 (GPU-00000000-0000-0000-0000-00000000000b) reports no NVLink fabric support while GPU 0 do",
        "no GPU is in an NVLink domain",
    ]
    with translation.override("ja"):
        shown = [str(sentence_html(problem)) for problem in problems]
    assert shown[0] == (
        '<span translate="no">GPU 0 (GPU-00000000-0000-0000-0000-00000000000a)</span> '
        "のファブリック登録はまだ進行中です"
    )
    assert all(not english_left(f"<p>{text}</p>") for text in shown), shown


def test_what_if_notes_and_refusals_read_back():
    _fitted, note = whatif.fit_guarantees({"a": 300, "b": 100}, 288)
    assert note == (
        "The replayed departments' guarantees add up to 400 GPUs, more than this layout's 288: they are "
        "scaled down in proportion."
    )
    layout = whatif.describe([whatif.TraySpec(f"h{i}", f"r{i % 2}", f"p{i % 3}", 4, None) for i in range(6)])
    assert layout == "2 racks, 6 partitions, 24 GPUs"
    with translation.override("ja"):
        assert sentences_i18n.translate(note).startswith("リプレイする部門の保証の合計は GPU 400 基")
        assert sentences_i18n.translate(layout) == "ラック 2 台、パーティション 6 個、GPU 24 基"


# --- pages ---------------------------------------------------------------------------------------------


@pytest.fixture
def admin(client_as, platform_admin, demo_inventory):
    return client_as(platform_admin)


def test_a_tray_drained_for_a_plan_keeps_english_and_shows_japanese(admin, platform_admin, local_target):
    run_job(make_department("Ops"), trays=[f"{FREE_RACK}-t02"], name="ops-busy")
    rack = Rack.objects.get(name=FREE_RACK)
    plan = plans.create_and_apply(rack, preset_layout("2x9"), drain=True, user=platform_admin)
    tray = ComputeTray.objects.get(hostname=f"{FREE_RACK}-t02")
    assert tray.state == TrayState.DRAIN
    # Stored (and sent to Slurm) in English.
    assert tray.state_reason == f"Rackplane plan #{plan.pk}: draining before repartitioning {FREE_RACK}"
    html = assert_japanese(admin, reverse("inventory:tray-detail", args=[tray.pk]))
    assert (
        f'Rackplane 計画 #{plan.pk}: <span translate="no">{FREE_RACK}</span> のパーティション再構成の前に'
        "ドレイン中"
    ) in html
    english = admin.get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
    assert f'draining before repartitioning <span translate="no">{FREE_RACK}</span>' in english


def test_a_plans_push_reason_is_stored_english_and_shown_japanese(admin, platform_admin, local_target):
    rack = Rack.objects.get(name=FREE_RACK)
    plan = plans.create_and_apply(rack, preset_layout("2x9"), drain=False, user=platform_admin)
    push = ConfigPush.objects.get(plan_id=plan.pk)
    assert push.reason == f"plan #{plan.pk}: repartition {FREE_RACK}"
    html = assert_japanese(admin, reverse("integrations:push-detail", args=[push.pk]))
    assert f'計画 #{plan.pk}: <span translate="no">{FREE_RACK}</span> のパーティション再構成' in html


def test_a_tray_with_fabric_problems_shows_them_in_japanese(admin):
    tray = ComputeTray.objects.get(hostname=f"{FREE_RACK}-t05")
    uuid = "GPU-00000000-0000-0000-0000-0000000000c1"
    gpus = [ReportedGpu(uuid, 0, None, None, FabricState.NOT_STARTED, None, GpuHealth.UNKNOWN)]
    tray.fabric_problems = summarize(tray.hostname, "text", gpus).problems
    tray.save(update_fields=["fabric_problems"])
    html = assert_japanese(admin, reverse("inventory:tray-detail", args=[tray.pk]))
    assert f'<span translate="no">GPU 0 ({uuid})</span> はファブリック登録を開始していません' in html


def test_a_partition_name_the_rule_refuses_is_explained_in_japanese(admin):
    """The wizard's finding holds the names rule's sentence as its value: both read back."""
    query = {"preset": "2x9", "name": ["P1", "p2"], "department": ["", ""], "slurm": ["", ""]}
    response = admin.get(reverse("integrations:plan-preview", args=[FREE_RACK]), query, **JA)
    html = response.content.decode()
    assert (
        "小文字を使ってください: ラックの名前と合わせて Kubernetes のラベル値と Slurm のブロック名になります"
        in html
    )
    assert not [text for text in english_left(html) if re.search(r"lower case|label value", text)]
