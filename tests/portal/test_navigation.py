"""The menu shows what each role may use (and every link answers 200 for them); each role's home; the branded
Django admin; the styled 403 in production mode; the favicon."""

import re

import pytest
from django.urls import reverse

from tests.factories import make_job, run_job

pytestmark = pytest.mark.django_db

NAV = re.compile(r'<nav aria-label="Main">(.*?)</nav>', re.S)
LINK = re.compile(r'<a href="([^"]+)"[^>]*>([^<]+)</a>')

EVERYONE = ["Racks", "Departments", "Jobs", "API"]
ADMIN_ONLY = ["Dashboard", "Partition plans", "Config pushes", "Webhooks &amp; email", "Admin"]


def menu(client) -> dict[str, str]:
    html = client.get("/").content.decode()
    return {label.strip(): href for href, label in LINK.findall(NAV.search(html).group(1))}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    "persona, shown, hidden",
    [
        ("platform_admin", ["Overview", *EVERYONE, *ADMIN_ONLY, "Audit log"], ["Home"]),
        ("lead_a", ["Home", *EVERYONE, "Audit log"], ADMIN_ONLY),
        ("member_a", ["Home", *EVERYONE], [*ADMIN_ONLY, "Audit log"]),
    ],
)
def test_the_menu_offers_what_the_role_may_open_and_each_link_answers_200(client_as, persona, shown, hidden):
    client = client_as(persona)
    links = menu(client)
    for label in shown:
        assert label in links, f"{persona} misses {label}"
    for label in hidden:
        assert label not in links, f"{persona} is offered {label}"
    for label, href in links.items():
        response = client.get(href)
        assert response.status_code == 200, f"{persona}: {label} ({href}) answered {response.status_code}"


def test_the_header_has_the_search_box(client_as):
    html = client_as("member_a").get("/").content.decode()
    assert f'action="{reverse("search")}"' in html
    assert 'id="header-search-q"' in html and 'name="q"' in html


def test_the_current_section_is_marked(client_as):
    html = client_as("platform_admin").get(reverse("integrations:plan-list")).content.decode()
    nav = NAV.search(html).group(1)
    assert re.search(r'href="/inventory/plans/" aria-current="page">Partition plans', nav)
    assert 'aria-current="page">Racks' not in nav
    html = client_as("lead_a").get(reverse("audit-list")).content.decode()
    assert 'aria-current="page">Audit log' in NAV.search(html).group(1)


# --- home per role ------------------------------------------------------------------------------------------


def test_an_admin_keeps_the_fleet_overview(client_as, demo_inventory):
    response = client_as("platform_admin").get("/")
    assert response.status_code == 200
    assert "Fleet overview" in response.content.decode()
    assert "overview" in response.context


def test_a_lead_sees_their_departments_work_not_the_fleet(
    client_as, demo_inventory, department_a, department_b, lead_a
):
    department_a.guaranteed_gpus = 8
    department_a.save()
    from tests.factories import free_trays

    trays = free_trays(3)
    running = make_job(department_a, "alpha-training", trays=trays[:1], submitted_by=lead_a)
    pending = make_job(
        department_a, "alpha-waiting", state="pending", gpus=16, pending_reason="Waiting for 16 GPUs."
    )
    other = make_job(department_b, "beta-training", trays=trays[1:2])
    response = client_as("lead_a").get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Your work" in html and "Fleet overview" not in html
    assert "Trays with fabric problems" not in html
    work = response.context["work"]
    assert [p.department.name for p in work.positions] == ["Alpha"]
    assert (work.guaranteed, work.in_use) == (8, 4)
    assert [j.pk for j in work.running_jobs] == [running.pk]
    assert [j.pk for j in work.pending_jobs] == [pending.pk]
    assert "alpha-training" in html and "alpha-waiting" in html and "Waiting for 16 GPUs." in html
    assert "beta-training" not in html and other.name not in html
    assert reverse("scheduling:department-detail", args=[department_a.slug]) in html


def test_a_members_home_shows_idle_gpus_of_their_department(
    client_as, demo_inventory, department_a, member_a
):
    from datetime import timedelta

    from django.utils import timezone

    from tenancy.models import GpuActivity
    from tests.factories import healthy_gpus

    gpus = healthy_gpus(4)
    job = run_job(department_a, gpus, "alpha-idle-job")
    now = timezone.now()
    GpuActivity.objects.bulk_create(
        GpuActivity(gpu=gpu, utilization=0.5, sampled_at=now, low_since=now - timedelta(hours=3))
        for gpu in gpus[:2]
    )
    response = client_as("member_a").get("/")
    work = response.context["work"]
    assert work.idle == 2
    assert {g.pk for g in work.idle_gpus} == {g.pk for g in gpus[:2]}
    html = response.content.decode()
    assert reverse("scheduling:job-detail", args=[job.pk]) in html
    assert f'data-gpu-uuid="{gpus[0].uuid}"' in html


def test_a_home_never_calls_gpus_without_data_working(client_as, demo_inventory, department_a, member_a):
    from django.utils import timezone

    from tenancy.models import GpuActivity
    from tests.factories import healthy_gpus

    gpus = healthy_gpus(4)
    run_job(department_a, gpus, "alpha-job")
    html = client_as("member_a").get("/").content.decode()
    assert "Idle GPUs unknown" in html and 'data-no-data="4"' in html and "is working" not in html

    GpuActivity.objects.bulk_create(
        GpuActivity(gpu=gpu, utilization=80.0, sampled_at=timezone.now()) for gpu in gpus[:3]
    )
    html = client_as("member_a").get("/").content.decode()
    assert "No idle GPUs among the 3 held GPUs that reported utilization." in html
    assert 'data-no-data="1"' in html

    GpuActivity.objects.create(gpu=gpus[3], utilization=70.0, sampled_at=timezone.now())
    html = client_as("member_a").get("/").content.decode()
    assert "every held GPU is working" in html and "data-no-data" not in html


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_work_home_is_a_fixed_number_of_queries(
    client_as, demo_inventory, department_a, member_a, django_assert_max_num_queries
):
    from tests.factories import free_trays

    client = client_as("member_a")
    client.get("/")
    for n, tray in enumerate(free_trays(10)):
        make_job(department_a, f"job-{n}", trays=[tray])
        make_job(department_a, f"wait-{n}", state="pending")
    with django_assert_max_num_queries(16):
        response = client.get("/")
    assert len(response.context["work"].running_jobs) == 10


def test_an_account_in_no_department_sees_the_overview(client_as, demo_inventory):
    assert "Fleet overview" in client_as("outsider").get("/").content.decode()


# --- admin, 403, favicon ------------------------------------------------------------------------------------


def test_django_admin_is_branded(client_as):
    html = client_as("platform_admin").get(reverse("admin:index")).content.decode()
    assert "Rackplane administration" in html
    assert "Django administration" not in html
    assert "<title>Rackplane administration | Rackplane admin</title>" in html


@pytest.mark.parametrize("path", ["/admin/", "/admin/login/?next=/admin/", "/admin/tenancy/department/"])
def test_django_admin_answers_a_signed_in_member_with_the_portals_403(client_as, path):
    # Not Django admin's login form again ("You are authenticated as ..., but are not authorized").
    response = client_as("member_a").get(path, follow=True)
    html = response.content.decode()
    assert response.status_code == 403
    assert "are not authorized" not in html and 'name="password"' not in html
    assert 'class="site-nav' in html or "<nav" in html  # the portal's page, its menu


def test_django_admin_still_asks_a_signed_out_visitor_to_sign_in(client):
    response = client.get("/admin/", follow=True)
    assert response.status_code == 200 and 'name="password"' in response.content.decode()


def test_the_403_page_is_styled_and_says_why_with_debug_off(client_as, settings):
    settings.DEBUG = False
    response = client_as("member_a").get(reverse("integrations:plan-list"))
    assert response.status_code == 403
    html = response.content.decode()
    assert "<h1>Not allowed</h1>" in html
    assert "Only platform admins may use" in html
    assert '<a href="/">Back to Home</a>' in html  # a member's menu calls it Home
    assert '<link rel="stylesheet" href="/static/css/portal.css">' in html
    assert "favicon.svg" in html
    response = client_as("member_a").get(reverse("audit-list"))
    assert response.status_code == 403
    assert "Only platform admins and department leads may use the audit log." in response.content.decode()


def test_the_favicon_is_linked_and_served(client, client_as):
    html = client_as("member_a").get("/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in html
    client.logout()
    response = client.get("/favicon.ico")  # browsers ask for it, signed in or not
    assert response.status_code == 301
    assert response["Location"] == "/static/favicon.svg"
    svg = client.get("/static/favicon.svg")
    assert svg.status_code == 200
    assert svg["Content-Type"].startswith("image/svg+xml")
    assert b"<svg" in b"".join(svg.streaming_content)
