"""The department page's idle panel: "no utilization data" (no activity row, or one older than
tenancy.activity.STALE_AFTER) never reads as "every allocated GPU is working", and the page lists the same
idle GPUs as the admin dashboard (both from scheduling.usage.idle_gpus_queryset)."""

import html
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import usage as selectors
from tenancy.activity import STALE_AFTER
from tests.factories import healthy_gpus, make_department, run_job, set_activity

pytestmark = pytest.mark.django_db

WORKING = "every allocated GPU is working"
IDLE_ROW = re.compile(r'<tr data-gpu-uuid="([^"]+)">(.*?)</tr>', re.S)


def text(response) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode())))


def idle_panel(response) -> str:
    markup = response.content.decode()
    start = markup.index('aria-labelledby="idle-gpus"')
    return markup[start : markup.index("</section>", start)]


def idle_uuids(markup: str) -> set[str]:
    return {uuid for uuid, _ in IDLE_ROW.findall(markup)}


def sample(gpus, utilization: float, *, age=timedelta(0), low_for: timedelta | None = None):
    set_activity(gpus, utilization, low_for, age=age)


@pytest.fixture
def gpus(demo_inventory):
    return healthy_gpus(16)


@pytest.fixture
def alpha(department_a):
    return department_a


@pytest.fixture
def page(client_as, lead_a, alpha):
    client = client_as(lead_a)

    def get():
        response = client.get(f"/tenancy/departments/{alpha.slug}/")
        assert response.status_code == 200
        return response

    return get


def hold(alpha, gpus):
    return run_job(alpha, gpus, "alpha-train", started_at=timezone.now() - timedelta(hours=2))


def test_every_gpu_reporting_and_none_idle_reads_working(page, alpha, gpus):
    hold(alpha, gpus[:8])
    sample(gpus[:8], 80.0)
    panel = idle_panel(page())
    assert WORKING in panel
    assert "data-no-data" not in panel


def test_gpus_without_data_are_not_working(page, alpha, gpus):
    """3 of 8 have no data: two never reported, one stopped 20 minutes ago (its row is stale)."""
    hold(alpha, gpus[:8])
    sample(gpus[:5], 80.0)
    sample(gpus[5:6], 80.0, age=STALE_AFTER + timedelta(minutes=10))
    response = page()
    panel = html.unescape(idle_panel(response))
    assert WORKING not in panel
    assert 'data-no-data="3"' in panel
    assert "No utilization data for 3 of its 8 allocated GPUs" in re.sub(r"<[^>]+>", "", panel)
    assert "No idle GPUs among the 5 allocated GPUs that reported utilization." in panel
    assert selectors.held_without_data(alpha) == 3


def test_no_gpu_reporting_says_idle_is_unknown(page, alpha, gpus):
    """The walkthrough's case: the demo's activity rows aged out."""
    hold(alpha, gpus[:8])
    sample(gpus[:8], 1.0, age=timedelta(hours=1))  # stale and never idle long enough: no data
    panel = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html.unescape(idle_panel(page()))))
    assert WORKING not in panel
    assert "Idle GPUs unknown: none of its allocated GPUs has reported utilization recently." in panel
    assert "No utilization data for 8 of its 8 allocated GPUs" in panel


def test_idle_gpus_are_listed_and_no_data_is_said_beside_them(page, alpha, gpus):
    hold(alpha, gpus[:8])
    sample(gpus[:2], 1.0, low_for=timedelta(hours=1))  # idle
    sample(gpus[2:6], 80.0)  # working; 6 and 7 have no data
    panel = idle_panel(page())
    assert idle_uuids(panel) == {gpu.uuid for gpu in gpus[:2]}
    assert 'data-no-data="2"' in panel
    assert WORKING not in panel


def test_a_department_holding_nothing_is_not_said_to_be_working(page, alpha, gpus):
    panel = idle_panel(page())
    assert "No idle GPUs: its jobs hold no GPUs right now." in html.unescape(panel)
    assert WORKING not in panel and "data-no-data" not in panel


def test_held_gpus_add_up_to_idle_working_and_no_data(alpha, gpus):
    """A stale row is "no data" even when it passes the idle test (tenancy.activity's one staleness rule)."""
    hold(alpha, gpus[:10])
    sample(gpus[:2], 1.0, low_for=timedelta(hours=1))  # idle
    sample(gpus[2:3], 1.0, low_for=timedelta(hours=1), age=STALE_AFTER * 2)  # low but stale: no data
    sample(gpus[3:7], 80.0)  # working
    sample(gpus[7:8], 80.0, age=STALE_AFTER * 2)  # no data; 8 and 9 none at all
    position = selectors.department_positions().of(alpha)
    no_data = selectors.held_without_data(alpha)
    assert (position.in_use, position.idle, no_data) == (10, 2, 4)
    assert selectors.held_without_data(alpha.pk) == 4


def test_the_admin_dashboard_and_the_department_page_agree_on_idle_gpus(
    client_as, platform_admin, lead_a, alpha, gpus
):
    beta = make_department("Beta", guaranteed_gpus=8)
    hold(alpha, gpus[:10])
    run_job(beta, gpus[10:14], "beta-serve", started_at=timezone.now() - timedelta(hours=2))
    sample(gpus[:2], 1.0, low_for=timedelta(hours=1))
    sample(gpus[2:3], 0.5, low_for=timedelta(hours=2), age=STALE_AFTER * 2)  # stale: no data, not idle
    sample(gpus[3:4], 0.5, low_for=timedelta(minutes=5))  # low, not for the whole window: not idle
    sample(gpus[4:8], 80.0)
    sample(gpus[10:12], 2.0, low_for=timedelta(hours=1))  # Beta's idle GPUs
    sample(gpus[14:15], 0.0, low_for=timedelta(hours=3))  # nobody holds it: free, never idle

    admin = client_as(platform_admin).get("/tenancy/dashboard/")
    assert admin.status_code == 200
    admin_markup = admin.content.decode()
    start = admin_markup.index('aria-labelledby="idle-cluster"')
    admin_rows = IDLE_ROW.findall(admin_markup[start : admin_markup.index("</section>", start)])
    admin_alpha = {uuid for uuid, row in admin_rows if ">Alpha<" in row}

    department = client_as(lead_a).get(f"/tenancy/departments/{alpha.slug}/")
    panel = idle_panel(department)
    expected = {gpu.uuid for gpu in gpus[:2]}
    assert idle_uuids(panel) == admin_alpha == expected
    assert {uuid for uuid, _ in admin_rows} == expected | {gpu.uuid for gpu in gpus[10:12]}
    # The count on the panel is the admin dashboard's per-department figure.
    pill = re.search(r'id="idle-gpus">.*?class="count-pill">(\d+)<', department.content.decode(), re.S)
    assert int(pill.group(1)) == len(expected) == selectors.department_positions().of(alpha).idle
    assert 'data-no-data="3"' in panel  # 2 stale; 8 and 9 never reported; 3 reported (low, not yet idle)


def test_an_idle_gpu_row_names_the_person_whose_job_holds_it(page, alpha, gpus, member_a):
    run_job(alpha, gpus[:4], name="notebook", submitted_by=member_a)
    sample(gpus[:4], 1.0, low_for=timedelta(hours=1))
    rows = dict(IDLE_ROW.findall(idle_panel(page())))
    assert set(rows) == {gpu.uuid for gpu in gpus[:4]}
    for row in rows.values():
        assert '<td class="person">member-a</td>' in row
