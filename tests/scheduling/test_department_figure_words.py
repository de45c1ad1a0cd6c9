"""A department page's cards say what each number is, so that "in use", "borrowed" and "fair share" visibly
agree (issue 31: "Fair share now 313 · 145 over quota" beside "160 borrowed" left a lead guessing): in use
= within the guarantee + borrowed beyond it; fair share = within the guarantee + beyond it; what it holds
beyond the fair share (in use - fair share) may be reclaimed. Every number comes from
`scheduling.usage.department_positions`; in English and in Japanese."""

import html
import re

import pytest

from scheduling.choices import JobState
from scheduling.usage import department_positions
from tests.factories import healthy_gpus, make_department, make_job, make_member, run_job
from tests.i18n_check import assert_japanese

pytestmark = pytest.mark.django_db


def note(page: str, name: str) -> str:
    """The text of the element marked data-figures=`name` (a card's note, the last in its card, or a <p>)."""
    found = re.search(rf'data-figures="{name}"[^>]*>(.*?)</(?:span>\s*</div|p)>', page, re.S)
    assert found, f"no data-figures={name!r} on the page"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split())


@pytest.fixture
def borrower(demo_inventory):
    """Alpha (guarantee 16, over-quota weight 1) holds 40 GPUs: 16 within its guarantee, 24 borrowed. Beta
    (guarantee 8, weight 9) asks for 200. Of the 210 schedulable GPUs the 186 beyond the guarantees go 1:9,
    so Alpha's fair share is 16 + 19 (18.6, rounded by the largest remainder) and 5 of its borrowed GPUs
    are beyond it."""
    alpha = make_department("Alpha", guaranteed_gpus=16, over_quota_weight=1)
    beta = make_department("Beta", guaranteed_gpus=8, over_quota_weight=9)
    gpus = healthy_gpus(40)
    run_job(alpha, gpus[:16], "alpha-train")
    run_job(alpha, gpus[16:], "alpha-borrow")
    make_job(beta, "beta-wait", JobState.PENDING, gpus=200)
    return alpha, make_member("kenji", alpha, role="lead")


def test_the_cards_name_each_number_so_they_add_up(client, borrower):
    alpha, lead = borrower
    p = department_positions().of(alpha)
    assert (p.in_use, p.in_quota, p.borrowed) == (40, 16, 24)
    assert (p.fair_share, p.within_guarantee_share, p.over_quota_share, p.reclaimable) == (35, 16, 19, 5)
    client.force_login(lead)
    page = client.get(f"/tenancy/departments/{alpha.slug}/").content.decode()

    assert note(page, "in-use") == "16 within the guarantee · 24 borrowed beyond it"
    assert note(page, "fair-share") == "16 within the guarantee + 19 beyond it · of 210 schedulable GPUs"
    assert note(page, "reclaimable") == (
        "5 GPUs held beyond the fair share (40 in use, fair share 35) may be reclaimed (preempted) for other "
        "departments' guarantees."
    )
    assert re.search(r'data-figure="in-use">40<', page) and re.search(r'data-figure="fair-share">35<', page)
    assert "over quota" not in note(page, "fair-share")  # the old words that read as "borrowed"


def test_a_department_without_a_share_beyond_its_guarantee_says_none(client, demo_inventory):
    alpha = make_department("Alpha", guaranteed_gpus=16)
    lead = make_member("kenji", alpha, role="lead")
    run_job(alpha, healthy_gpus(8), "alpha-train")
    client.force_login(lead)
    page = client.get(f"/tenancy/departments/{alpha.slug}/").content.decode()
    assert note(page, "in-use") == "8 within the guarantee · 0 borrowed beyond it"
    assert note(page, "fair-share") == "8 within the guarantee, none beyond it · of 210 schedulable GPUs"
    assert 'data-figures="reclaimable"' not in page


def test_the_cards_in_japanese(client, borrower):
    alpha, lead = borrower
    client.force_login(lead)
    page = assert_japanese(client, f"/tenancy/departments/{alpha.slug}/")
    assert note(page, "in-use") == "保証の範囲内 16 · 保証を超えて借用中 24"
    fair_share = "保証の範囲内 16 + 保証を超えて 19 · スケジュール可能な GPU 210 基のうち"
    assert note(page, "fair-share") == fair_share
    assert "（使用中 40 基、フェアシェア 35 基）" in note(page, "reclaimable")  # noqa: RUF001
