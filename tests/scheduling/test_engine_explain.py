"""`explain`'s alternatives: each reason said only of the partitions it is true of (a walkthrough read "kept
for larger jobs" of a partition exactly as small as the chosen one)."""

import pytest
from django.template import Context, Template
from django.utils import translation

from scheduling.engine.cluster import Cluster
from scheduling.engine.placement import Request, explain, place
from tests.scheduling.test_engine import cluster_of


def why(cluster: Cluster, request: Request) -> tuple[set[str], str]:
    placement = place(cluster, request)
    assert placement is not None
    return {cluster.partition_label(cluster.tray_part[t]) for t, _ in placement}, explain(
        cluster, request, placement
    )


def test_an_equally_small_alternative_is_said_to_lose_the_tie_break_not_to_be_kept_for_larger_jobs():
    c = cluster_of({"r03": [18], "r08": [18]})
    chosen, sentence = why(c, Request(72))
    assert chosen == {"r03 p1"}  # the first to reach 18 free trays (rack order, as the trays were counted)
    assert sentence == (
        "in NVLink partition r03 p1, the smallest with 18 free trays (best fit); 1 other partition was "
        "equally small (r08 p1 (18)): of equally small partitions, the one that reached that many free "
        "trays first is taken"
    )
    assert "kept for larger jobs" not in sentence


def test_larger_and_equal_alternatives_each_get_their_own_reason():
    c = cluster_of({"r1": [9, 9], "r2": [9, 9], "r3": [18]})
    chosen, sentence = why(c, Request(36))
    assert chosen == {"r1 p1"}
    assert sentence == (
        "in NVLink partition r1 p1, the smallest with 9 free trays (best fit); 3 other partitions were "
        "equally small (r1 p2 (9), r2 p1 (9), r2 p2 (9)): of equally small partitions, the one that reached "
        "that many free trays first is taken; 1 other partition could have taken it, kept for larger jobs "
        "(the next best, with their free trays: r3 p1 (18))"
    )


def test_a_shared_partition_after_the_departments_own_is_said_to_come_later_whatever_its_size():
    c = cluster_of({"r1": [9, 9], "r2": [18]}, owners={("r2", "p1"): "vision"})
    chosen, sentence = why(c, Request(36, department="vision"))
    assert chosen == {"r2 p1"}  # its own partition first, although shared ones are smaller
    assert sentence == (
        "in NVLink partition r2 p1, the smallest with 9 free trays (best fit); 2 other partitions could "
        "have taken it but come later in the order partitions are used (the department's own, then shared, "
        "then borrowed): r1 p1 (9), r1 p2 (9)"
    )


def test_a_lone_fit_says_no_other_partition_could_take_it():
    _, sentence = why(cluster_of({"r1": [18]}), Request(72))
    assert sentence.endswith("no other partition could take it")


@pytest.mark.parametrize(
    "language, shown, gone",
    [
        ("en", "1 other partition was equally small (r08 p1 (18))", "kept for larger jobs"),
        ("ja", "ほかに 1 個のパーティションが同じ大きさでした", "より大きなジョブのために残して"),
    ],
)
def test_the_tie_is_rendered_in_the_viewers_language(language, shown, gone):
    """The sentence as a page shows it (the `sentence_words` filter reads the stored English back)."""
    c = cluster_of({"r03": [18], "r08": [18]})
    _, sentence = why(c, Request(72))
    with translation.override(language):
        page = Template("{% load rackplane %}{{ why|sentence_words }}").render(Context({"why": sentence}))
    assert shown in page and gone not in page, page


def test_many_alternatives_are_counted_and_the_first_three_of_each_reason_named():
    """Counted per bucket, never listed whole (at 10,000 racks a sentence per start visited every partition
    of the fleet): the counts are every partition's, the names the first three in the order they are used."""
    racks = {f"r{n:02d}": [9, 9] for n in range(1, 11)} | {f"s{n}": [18] for n in range(1, 6)}
    owners = {(f"r{n:02d}", "p2"): "vision" for n in range(7, 11)}
    chosen, sentence = why(cluster_of(racks, owners=owners), Request(36, department="vision"))
    assert chosen == {"r07 p2"}  # its own partitions first
    assert sentence == (
        "in NVLink partition r07 p2, the smallest with 9 free trays (best fit); 3 other partitions were "
        "equally small (r08 p2 (9), r09 p2 (9), r10 p2 (9)): of equally small partitions, the one that "
        "reached that many free trays first is taken; 21 other partitions could have taken it but come later "
        "in the order partitions are used (the department's own, then shared, then borrowed): r01 p1 (9), "
        "r01 p2 (9), r02 p1 (9) and 18 more"
    )
    _, sentence = why(cluster_of(racks), Request(36))
    assert sentence.startswith(
        "in NVLink partition r01 p1, the smallest with 9 free trays (best fit); 19 other partitions were "
        "equally small (r01 p2 (9), r02 p1 (9), r02 p2 (9) and 16 more)"
    )
    assert sentence.endswith(
        "5 other partitions could have taken it, kept for larger jobs (the next best, "
        "with their free trays: s1 p1 (18), s2 p1 (18), s3 p1 (18) and 2 more)"
    )
