"""The what-if table's figures in the viewer's language (scheduling.templatetags.whatif_figures): units and
"n/a" translated, numbers in the language's format; the plain-text table (comparison_text) stays English."""

import pytest
from django.template import Context, Template
from django.utils import translation

from scheduling.whatif import comparison

ROW = (
    "{% load whatif_figures %}{% for cell in row.cells %}"
    "[{{ cell|whatif_value:row.unit }}|{{ cell|whatif_delta:row.unit }}]{% endfor %}"
)


def _shown(key: str, results, language: str) -> str:
    row = next(row for row in comparison(results) if row["key"] == key)
    with translation.override(language):
        return Template(ROW).render(Context({"row": row}))


NOW = {"avg_wait_s": 3600.0, "multi_tray_in_one_partition": 0.5, "guarantee_shortfall_gpu_s": 3600.0 * 1234}
LAYOUT = {
    "avg_wait_s": 5400.0,
    "multi_tray_in_one_partition": 0.625,
    "guarantee_shortfall_gpu_s": 3600.0 * 34,
}


@pytest.mark.parametrize(
    ("language", "key", "shown"),
    [
        ("en", "avg_wait_s", "[1.00 h|][1.50 h|+0.50 h][n/a|]"),
        ("ja", "avg_wait_s", "[1.00 時間|][1.50 時間|+0.50 時間][該当なし|]"),
        ("en", "multi_tray_in_one_partition", "[50.0%|][62.5%|+12.5 pts][n/a|]"),
        ("ja", "multi_tray_in_one_partition", "[50.0%|][62.5%|+12.5 ポイント][該当なし|]"),
        ("en", "guarantee_shortfall_gpu_s", "[1,234 GPU-h|][34 GPU-h|-1,200 GPU-h][n/a|]"),
        ("ja", "guarantee_shortfall_gpu_s", "[1,234 GPU 時間|][34 GPU 時間|-1,200 GPU 時間][該当なし|]"),
    ],
)
def test_a_figure_and_its_difference_in_the_viewers_language(language, key, shown):
    assert _shown(key, [("now", NOW), ("layout", LAYOUT), ("broken", None)], language) == shown


def test_the_plain_text_table_keeps_its_english_units():
    row = next(
        row
        for row in comparison([("now", NOW), ("layout", LAYOUT)])
        if row["key"] == "multi_tray_in_one_partition"
    )
    assert [cell["text"] for cell in row["cells"]] == ["50.0%", "62.5%"]
    assert row["cells"][1]["delta"] == "+12.5 pts"
