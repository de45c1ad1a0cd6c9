"""The partition preview's diffs show the lines a plan changes and no other.

A walkthrough gave p2 of a rack carved 2x9 to a department: the Kubernetes node file's diff showed labels
that stay as they are (`fabric.topograph.run/tier-0: su-2`, `rackplane.io/pool: nvl72`, ...) removed and
added again, and its count read "+90 -81" where each of p2's nine nodes gains one label and changes one.
difflib.unified_diff's matcher treats a line that repeats in more than 1% of a file of over 200 lines as
junk it never matches; the preview now diffs with core.diffs, which matches every unchanged line.
"""

from __future__ import annotations

import pytest

from core.diffs import diff_text
from integrations.plans.views import _file_diffs
from tests.factories import make_department
from tests.integrations.plans.test_wizard import url

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]

NODES = "kubernetes/02-nodes.yaml"


@pytest.mark.slow(reason="a plan previewed: every file rendered twice, over 0.3 s on 2 cores")
def test_the_previews_counts_are_the_lines_the_plan_changes(admin_client_logged_in, demo_inventory):
    make_department("Inference", guaranteed_gpus=36)
    params = {"preset": "2x9", "name": ["p1", "p2"], "department": ["", "inference"], "slurm": ["", ""]}
    preview = admin_client_logged_in.get(url("plan-preview", "gb-r02", **params))
    assert preview.status_code == 200 and preview.context["check"].ok
    files = {diff.path: diff for diff in preview.context["files"]}

    for path, diff in files.items():
        added = [text[1:] for css, text in diff.lines if css == "diff-add"]
        removed = [text[1:] for css, text in diff.lines if css == "diff-del"]
        assert (diff.added, diff.removed) == (len(added), len(removed)), path
        # A line shown removed and added again is one that did not change.
        assert not set(added) & set(removed), (path, sorted(set(added) & set(removed)))

    # p2's nine nodes (gb-r02-t10..t18) each gain the department label and change their service tier.
    nodes = files[NODES]
    assert (nodes.added, nodes.removed) == (18, 9)
    assert [text for css, text in nodes.lines if css == "diff-del"] == [
        "-    rackplane.io/service-tier: gpu"
    ] * 9
    assert sorted(text for css, text in nodes.lines if css == "diff-add") == sorted(
        ["+    rackplane.io/department: inference"] * 9 + ["+    rackplane.io/service-tier: inference"] * 9
    )
    html = preview.content.decode()
    assert '<span class="diff-add">+18</span> <span class="diff-del">\N{MINUS SIGN}9</span>' in html


def test_a_removed_yaml_document_separator_counts_as_removed_not_as_a_header():
    """A removed `---` reads `----`: the preview styled it as a file header and left it out of the count."""
    old = "kind: ResourceFlavor\nname: gpu\n---\nkind: ResourceFlavor\nname: vision\n"
    new = "kind: ResourceFlavor\nname: gpu\n"
    (diff,) = _file_diffs({"kubernetes/04-resourceflavors.yaml": diff_text(old, new, "a", "b")})
    assert (diff.added, diff.removed) == (0, 3)
    assert diff.lines[:2] == [("diff-file", "--- a"), ("diff-file", "+++ b")]
    assert [text for css, text in diff.lines if css == "diff-del"] == [
        "----",
        "-kind: ResourceFlavor",
        "-name: vision",
    ]


@pytest.mark.slow(reason="a plan previewed: every file rendered twice, over 0.3 s on 2 cores")
def test_a_rack_split_in_two_shows_in_every_file_the_fewest_lines_that_make_the_change(
    admin_client_logged_in, demo_inventory, monkeypatch
):
    """The second walkthrough split gb-r04's one partition 2x9 and gave p2 to a department: the new
    ResourceFlavor's `labels:`, `spec:` and `nodeLabels:` lines were shown removed and added again (+21 -8).
    Every file's counts are now those of difflib's matcher with autojunk off (the most lines matched)."""
    import difflib

    from integrations.plans import service

    make_department("Inference", guaranteed_gpus=36)
    texts = {}

    def keep(old, new, fromfile, tofile):
        texts[fromfile[2:]] = old.splitlines(keepends=True), new.splitlines(keepends=True)
        return diff_text(old, new, fromfile, tofile)

    monkeypatch.setattr(service, "diff_text", keep)
    params = {"preset": "2x9", "name": ["p1", "p2"], "department": ["", "inference"], "slurm": ["", ""]}
    preview = admin_client_logged_in.get(url("plan-preview", "gb-r03", **params))  # one partition, as gb-r04
    assert preview.status_code == 200 and preview.context["check"].ok
    files = {diff.path: diff for diff in preview.context["files"]}
    assert "kubernetes/04-resourceflavors.yaml" in files and set(files) == set(texts)
    for path, diff in files.items():
        old, new = texts[path]
        codes = difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
        fewest = (
            sum(j2 - j1 for tag, _, _, j1, j2 in codes if tag in ("replace", "insert")),
            sum(i2 - i1 for tag, i1, i2, _, _ in codes if tag in ("replace", "delete")),
        )
        assert (diff.added, diff.removed) == fewest, path
