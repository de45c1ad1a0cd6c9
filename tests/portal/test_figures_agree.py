"""Every screen's quota figures are one count (scheduling.usage.department_positions: in use = in quota, i.e.
within the guarantee, + borrowed): the home page, the department list and page, the departments API and its
quota endpoint agree, for the seeded demo and for a department that borrows; and the home page's line never
reads as more of a guarantee in use than there is."""

import html
import re

import pytest
from django.contrib.auth import get_user_model

from core.access import Role
from scheduling.usage import department_positions
from tenancy.models import Department, Membership
from tests.factories import free_trays, make_department, make_member, run_job, seed_demo
from tests.i18n_check import assert_japanese

pytestmark = pytest.mark.django_db

HOME_BORROWING = re.compile(
    r"([\d,]+) GPUs? in use: ([\d,]+) within the guarantee of ([\d,]+), ([\d,]+) borrowed beyond it"
)
HOME_WITHIN = re.compile(r"([\d,]+) of ([\d,]+) guaranteed GPUs in use")


def number(text: str) -> int:
    return int(text.replace(",", ""))


def text_of(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def row(page: str, pattern: str) -> str:
    """The text of the table row whose HTML matches `pattern`."""
    for found in re.finditer(r"<tr[^>]*>.*?</tr>", page, re.S):
        if re.search(pattern, found.group(0)):
            return text_of(found.group(0))
    raise AssertionError(f"no row matching {pattern!r}")


def home_line(page: str) -> dict:
    """The home page's line: in use, within the guarantee, the guarantee, borrowed."""
    line = text_of(re.search(r'<span data-figures="in-use">(.*?)</span>', page, re.S).group(1))
    if found := HOME_BORROWING.fullmatch(line):
        in_use, in_quota, guaranteed, borrowed = map(number, found.groups())
        return {"guaranteed": guaranteed, "in_use": in_use, "in_quota": in_quota, "borrowed": borrowed}
    found = HOME_WITHIN.fullmatch(line)
    assert found, line
    in_quota, guaranteed = map(number, found.groups())
    return {"guaranteed": guaranteed, "in_use": in_quota, "in_quota": in_quota, "borrowed": 0}


def screens(client, department: Department) -> dict[str, dict]:
    """What each screen says of `department`'s guarantee and use (the client's user belongs to it only)."""
    slug = department.slug
    shown = {}
    home = client.get("/").content.decode()
    shown["home line"] = home_line(home)
    cells = row(home, rf'href="/tenancy/departments/{slug}/"').split()
    shown["home table"] = dict(
        zip(("guaranteed", "in_use", "borrowed"), map(number, cells[-6:-3]), strict=True)
    )

    listed = row(client.get("/tenancy/departments/").content.decode(), rf'data-department="{slug}"')
    found = re.search(
        r"([\d,]+) (?:∞|[\d,]+) \S+ -?\d+ ([\d,]+) ([\d,]+) in quota(?: \+ ([\d,]+) borrowed)?", listed
    )
    assert found, listed
    guaranteed, in_use, in_quota, borrowed = found.groups()
    shown["department list"] = {
        "guaranteed": number(guaranteed),
        "in_use": number(in_use),
        "in_quota": number(in_quota),
        "borrowed": number(borrowed or "0"),
    }

    page = client.get(f"/tenancy/departments/{slug}/").content.decode()
    shown["department page"] = {
        name.replace("-", "_"): number(text_of(value))
        for name, value in re.findall(
            r'data-figure="(guaranteed|in-use|in-quota|borrowed)">(.*?)</span>', page
        )[:4]
    }

    quota = client.get(f"/api/v1/departments/{slug}/quota/").json()
    shown["API quota"] = {name: quota[name] for name in ("guaranteed", "in_use", "in_quota", "borrowed")}
    detail = client.get(f"/api/v1/departments/{slug}/").json()
    shown["API department"] = {
        name: detail[name] for name in ("guaranteed_gpus", "in_use", "in_quota", "borrowed")
    }
    shown["API department"]["guaranteed"] = shown["API department"].pop("guaranteed_gpus")
    return shown


def assert_screens_agree(client, department: Department) -> dict:
    position = department_positions().of(department)
    truth = {
        "guaranteed": position.guaranteed,
        "in_use": position.in_use,
        "in_quota": position.in_quota,
        "borrowed": position.borrowed,
    }
    assert truth["in_use"] == truth["in_quota"] + truth["borrowed"]
    for screen, figures in screens(client, department).items():
        assert figures == {name: truth[name] for name in figures}, (screen, figures, truth)
    return truth


def test_a_borrowing_department_reads_the_same_everywhere(client, demo_inventory):
    research = make_department("Research", guaranteed_gpus=8)
    lead = make_member("rlead", research, role=Role.LEAD)
    run_job(research, name="r1", trays=free_trays(2))  # 8 GPUs: its whole guarantee
    run_job(research, name="r2", trays=free_trays(3))  # 12 more: borrowed
    client.force_login(lead)

    truth = assert_screens_agree(client, research)

    assert truth == {"guaranteed": 8, "in_use": 20, "in_quota": 8, "borrowed": 12}
    # The home line says the borrowed GPUs apart: never "20 of 8 guaranteed GPUs in use".
    home = text_of(client.get("/").content.decode())
    assert "20 GPUs in use: 8 within the guarantee of 8, 12 borrowed beyond it" in home
    assert "of 8 guaranteed GPUs in use" not in home
    japanese = text_of(assert_japanese(client, "/"))
    assert "20 基の GPU を使用中（保証 8 基の範囲内で 8 基、保証を超えて 12 基を借用中）" in japanese  # noqa: RUF001


def test_a_department_within_its_guarantee_reads_the_same_everywhere(client, demo_inventory):
    vision = make_department("Vision", guaranteed_gpus=16)
    member = make_member("vmember", vision)
    run_job(vision, name="small", trays=free_trays(1))
    client.force_login(member)

    assert assert_screens_agree(client, vision) == {
        "guaranteed": 16,
        "in_use": 4,
        "in_quota": 4,
        "borrowed": 0,
    }
    assert "4 of 16 guaranteed GPUs in use" in text_of(client.get("/").content.decode())


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
def test_the_demo_reads_the_same_on_every_screen(client, var_dir):
    seed_demo()
    borrowing = 0
    for membership in Membership.objects.filter(role=Role.LEAD).select_related("department", "user"):
        # Each demo lead leads one department and belongs to no other (the home line is that department's).
        assert Membership.objects.filter(user=membership.user).count() == 1
        client.force_login(get_user_model().objects.get(pk=membership.user_id))
        truth = assert_screens_agree(client, membership.department)
        assert truth["in_quota"] <= truth["guaranteed"]
        borrowing += truth["borrowed"] > 0
    assert borrowing >= 1  # Research borrows in the demo
