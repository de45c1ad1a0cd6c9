"""Jobs that ask for MIG slices (scheduling.slices, scheduling.services.slices): submission through the API
and the job form with its refusals, placement on free MIG devices by the pass, what the job's page and API
show, and the GPU-equivalents a slice counts for in quota. On the demo inventory with gb-r03-t02 given
mig-parted's all-balanced layout (2 x 1g.23gb, 1 x 2g.47gb, 1 x 3g.93gb on each of its 4 GPUs)."""

from __future__ import annotations

import html
import re
from fractions import Fraction

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inventory.models import ComputeTray, Gpu, MigDevice
from scheduling.choices import FaultAction, JobEventKind, JobState, PriorityClass
from scheduling.models import Allocation, Job, JobEvent, SliceAllocation
from scheduling.services.actions import cancel_job
from scheduling.services.mig_layouts import MigLayoutRefused, set_mig_layout
from scheduling.services.passes import run_pass
from scheduling.slices import equivalents_of, memory_mib, slice_offer
from tests.factories import make_department, make_job, mig_tray
from tests.scheduling.test_fault_requeue import set_policy, xid_79

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\nsrun python serve.py\n"
TRAY = "gb-r03-t02"


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=96)


@pytest.fixture
def tray(demo_inventory):
    return mig_tray(TRAY)


@pytest.fixture
def submit(api_as, member_a, tray, django_capture_on_commit_callbacks):
    """POST a slice job as a member of Research; the pass runs on commit."""

    def post(**fields):
        body = {"department": "research", "name": "serve", "work": {"script": SCRIPT}, **fields}
        with django_capture_on_commit_callbacks(execute=True):
            response = api_as(member_a).post("/api/v1/jobs/", body, format="json")
        return response

    return post


# --- what the fleet offers --------------------------------------------------------------------------------


def test_the_offer_is_what_the_gpus_reported_and_the_layouts_chose(tray):
    offer = slice_offer()
    assert offer.profiles["1g.23gb"].memory_mib == 22528 and offer.profiles["3g.93gb"].compute_slices == 3
    assert "1g.47gb" in offer.profiles  # reported by the driver, in no layout
    assert offer.per_tray == {"1g.23gb": 8, "2g.47gb": 4, "3g.93gb": 4}
    assert [p.name for p in offer.offered()] == ["1g.23gb", "2g.47gb", "3g.93gb"]
    assert equivalents_of("3g.93gb", 2, offer) == Fraction(6, 7)
    assert memory_mib(23) == 21935  # GB of 10^9 bytes, as profile names count: fits a 1g.23gb


# --- submission ------------------------------------------------------------------------------------------


def test_a_profile_and_a_count(submit):
    response = submit(mig_profile="1g.23gb", mig_slices=2)
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.gpus, job.mig_profile, job.mig_slices, job.mig_memory_gb, job.topology) == (
        0,
        "1g.23gb",
        2,
        None,
        "any",
    )
    body = response.json()
    assert (body["gpus"], body["mig_profile"], body["mig_slices"]) == (0, "1g.23gb", 2)
    assert JobEvent.objects.filter(
        job=job, kind=JobEventKind.SUBMITTED, message="2 MIG slices 1g.23gb"
    ).exists()


@pytest.mark.parametrize(
    ("gb", "profile"), [(1, "1g.23gb"), (23, "1g.23gb"), (24, "2g.47gb"), (90, "3g.93gb")]
)
def test_a_memory_size_chooses_the_smallest_offered_profile(submit, gb, profile):
    # 24 GB does not fit a 1g.23gb (22.00 GiB); 1g.47gb has the memory but no layout offers it.
    response = submit(mig_memory_gb=gb)
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.mig_profile, job.mig_slices, job.mig_memory_gb) == (profile, 1, gb)


@pytest.mark.slow(reason="22 cases, 0.9 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"mig_profile": "9g.999gb"}, "mig_profile", "not a MIG profile any GPU reported"),
        ({"mig_profile": "1G.23GB"}, "mig_profile", "not a MIG profile any GPU reported"),
        ({"mig_profile": "1g.47gb"}, "mig_profile", "no tray's MIG layout offers 1g.47gb"),
        ({"mig_profile": "1g.23gb", "mig_slices": 9}, "mig_slices", "a tray offers at most 8"),
        ({"mig_profile": "1g.23gb", "mig_slices": 0}, "mig_slices", "greater than or equal to 1"),
        ({"mig_profile": "1g.23gb", "mig_slices": 29}, "mig_slices", "less than or equal to 28"),
        ({"mig_profile": "1g.23gb", "gpus": 1}, "gpus", "not both"),
        ({"mig_memory_gb": 200}, "mig_memory_gb", "no MIG profile a tray offers has 200 GB"),
        ({"mig_memory_gb": 10**6}, "mig_memory_gb", "less than or equal to 1000"),
        ({"mig_profile": "1g.23gb", "mig_memory_gb": 20}, "mig_memory_gb", "not both"),
        ({"mig_profile": "1g.23gb", "topology": "partition"}, "topology", "no NVLink"),
        ({"mig_profile": "1g.23gb", "topology": "rack"}, "topology", "no NVLink"),
        ({"mig_profile": "1g.23gb", "fallback_topology": "any"}, "fallback_topology", "no wider topology"),
        ({"mig_profile": "1g.23gb", "mig_slices": "2"}, "mig_slices", "integer"),
        ({"mig_profile": "1g.23gb", "mig_slices": True}, "mig_slices", "integer"),
        ({"mig_profile": "1g.23gb", "mig_slices": 1.5}, "mig_slices", "integer"),
        ({"mig_profile": 7}, "mig_profile", "string"),
        ({"mig_profile": ["1g.23gb"]}, "mig_profile", "string"),
        ({"mig_profile": "1g.23gb\x07"}, "mig_profile", ""),
        ({"mig_profile": "x" * 33}, "mig_profile", "33"),
        ({"mig_memory_gb": "40"}, "mig_memory_gb", "integer"),
        ({}, "gpus", "This field is required."),
    ],
)
def test_a_bad_slice_request_is_refused_in_words_and_nothing_is_written(submit, fields, field, words):
    before = (Job.objects.count(), JobEvent.objects.count())
    response = submit(**fields)
    assert response.status_code == 400, response.json()
    errors = response.json()
    assert field in errors, errors
    assert words in str(errors[field]), errors
    assert (Job.objects.count(), JobEvent.objects.count()) == before


def test_a_lone_surrogate_in_the_profile_is_refused(api_as, member_a, tray):
    body = (
        b'{"department": "research", "name": "s", "work": {"script": "#!/bin/bash\\ntrue\\n"}, '
        b'"mig_profile": "1g.23gb\\ud800"}'
    )
    response = api_as(member_a).post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400 and "lone surrogate" in str(response.json())
    assert not Job.objects.exists()


def test_the_department_limit_and_guarantee_count_slices_in_gpu_equivalents(api_as, member_a, tray):
    research = member_a.memberships.get().department
    research.guaranteed_gpus, research.limit_gpus = 0, 0
    research.save(update_fields=["guaranteed_gpus", "limit_gpus"])
    body = {"department": "research", "name": "s", "work": {"script": SCRIPT}, "mig_profile": "1g.23gb"}
    response = api_as(member_a).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert "count for 0.14 GPUs, over the department's limit of 0" in str(response.json()["mig_slices"])
    research.limit_gpus = None
    research.save(update_fields=["limit_gpus"])
    response = api_as(member_a).post("/api/v1/jobs/", {**body, "priority_class": "inference"}, format="json")
    assert response.status_code == 400
    assert "count for 0.14 GPUs" in str(response.json()["priority_class"])
    assert not Job.objects.exists()


def test_the_openapi_document_describes_the_slice_fields(api_as, member_a):
    schema = api_as(member_a).get("/api/schema/", HTTP_ACCEPT="application/json").json()
    submit = schema["components"]["schemas"]["SlurmJobSubmit"]["properties"]
    assert submit["mig_profile"]["type"] == "string" and "1g.23gb" in submit["mig_profile"]["description"]
    assert (submit["mig_slices"]["minimum"], submit["mig_slices"]["maximum"]) == (1, 28)
    assert submit["mig_memory_gb"]["maximum"] == 1000
    assert "gpus" not in schema["components"]["schemas"]["SlurmJobSubmit"].get("required", [])
    detail = schema["components"]["schemas"]["JobDetail"]["properties"]
    assert {"mig_profile", "mig_slices", "mig_memory_gb", "slices"} <= set(detail)


# --- placement -------------------------------------------------------------------------------------------


def _held(job) -> list[SliceAllocation]:
    return list(SliceAllocation.objects.filter(job=job).select_related("gpu__tray"))


def test_the_pass_places_a_slice_job_on_free_devices_of_its_profile_on_one_tray(submit, api_as, member_a):
    response = submit(mig_profile="1g.23gb", mig_slices=3)
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state in (JobState.STARTING, JobState.RUNNING), job.pending_reason
    assert job.placement == [TRAY]
    held = _held(job)
    assert len(held) == 3 and {h.profile for h in held} == {"1g.23gb"}
    devices = {d.uuid: d for d in MigDevice.objects.filter(gpu__tray__hostname=TRAY, profile="1g.23gb")}
    assert {h.mig_uuid for h in held} <= set(devices)
    assert {h.gpu_id for h in held} == {devices[h.mig_uuid].gpu_id for h in held}
    # Packing: the first GPU's two 1g.23gb first, then one on the next GPU (fewest free compute slices).
    assert sorted(h.gpu.index for h in held) == [0, 0, 1]
    assert not Allocation.objects.filter(job=job).exists()  # never whole GPUs
    placed = JobEvent.objects.get(job=job, kind=JobEventKind.PLACED).message
    assert placed.startswith("placed in quota on gb-r03-t02 GPU 0 1g.23gb (MIG-")

    detail = api_as(member_a).get(f"/api/v1/jobs/{job.pk}/").json()
    assert sorted((s["tray"], s["gpu_index"], s["profile"]) for s in detail["slices"]) == [
        (TRAY, 0, "1g.23gb"),
        (TRAY, 0, "1g.23gb"),
        (TRAY, 1, "1g.23gb"),
    ]
    assert {s["mig_uuid"] for s in detail["slices"]} == {h.mig_uuid for h in held}
    assert {s["gpu"] for s in detail["slices"]} <= set(
        Gpu.objects.filter(tray__hostname=TRAY).values_list("uuid", flat=True)
    )


def test_the_job_page_shows_the_slices_held(submit, client_as, member_a):
    job = Job.objects.get(pk=submit(mig_profile="3g.93gb").json()["id"])
    held = _held(job)
    page = client_as(member_a).get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert "MIG slices held" in page and held[0].mig_uuid in page
    assert "1 \u00d7 <code>3g.93gb</code>" in page


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_slice_job_waits_in_words_when_no_slice_of_its_profile_is_free(submit, department_a):
    jobs = [Job.objects.get(pk=submit(mig_profile="3g.93gb").json()["id"]) for _ in range(5)]
    assert [j.state for j in jobs[:4]] != [JobState.PENDING] * 4
    fifth = jobs[4]
    fifth.refresh_from_db()
    assert fifth.state == JobState.PENDING
    assert fifth.pending_reason == "waiting: no free 3g.93gb slice: all 4 on trays in service are held"
    assert len({h.mig_uuid for j in jobs for h in _held(j)}) == 4
    one = Job.objects.get(pk=submit(mig_profile="1g.23gb").json()["id"])
    too_many = Job.objects.get(pk=submit(mig_profile="1g.23gb", mig_slices=8).json()["id"])
    assert one.state != JobState.PENDING
    assert too_many.state == JobState.PENDING and not _held(too_many)
    assert too_many.pending_reason == (
        "waiting: no free 1g.23gb slice: no tray has 8 free (at most 7 free on one tray)"
    )
    # Cancelling one gives its device back; the next pass places the waiting job.
    cancel_job(jobs[0])
    run_pass()
    fifth.refresh_from_db()
    assert fifth.state != JobState.PENDING and len(_held(fifth)) == 1


def test_no_tray_in_service_offers_it(submit):
    ComputeTray.objects.filter(hostname=TRAY).update(state="drain", state_reason="maintenance")
    job = Job.objects.get(pk=submit(mig_profile="2g.47gb").json()["id"])
    assert job.state == JobState.PENDING
    assert job.pending_reason == "waiting: no free 2g.47gb slice: no tray in service offers it"


def test_a_slice_job_waits_while_its_department_would_pass_its_limit(submit, department_a):
    department_a.limit_gpus, department_a.guaranteed_gpus = 1, 1
    department_a.save(update_fields=["limit_gpus", "guaranteed_gpus"])
    make_job(department_a, "whole", JobState.RUNNING, trays=[], gpus=1, over_quota=False)
    job = Job.objects.get(pk=submit(mig_profile="1g.23gb").json()["id"])
    assert job.state == JobState.PENDING
    assert job.pending_reason == (
        "waiting: its department would hold 1.14 GPU-equivalents with it, over its limit of 1"
    )


def test_a_whole_gpu_job_never_takes_a_mig_gpu_and_a_slice_job_never_a_whole_one(submit, department_a):
    Job.objects.all().delete()
    whole = make_job(department_a, "whole", JobState.PENDING, gpus=4)
    slice_job = Job.objects.get(pk=submit(mig_profile="1g.23gb").json()["id"])
    whole.refresh_from_db()
    assert whole.state != JobState.PENDING and TRAY not in whole.placement
    assert not Allocation.objects.filter(gpu__tray__hostname=TRAY).exists()
    assert not Allocation.objects.filter(job=slice_job).exists() and len(_held(slice_job)) == 1


# --- the job form and its preview ------------------------------------------------------------------------

NEW = "/scheduling/jobs/new/"
PREVIEW = "/scheduling/jobs/new/preview/"


def _form(**fields) -> dict:
    return {"department": "research", "name": "serve", "backend": "slurm", "script": SCRIPT, **fields}


def _words(response) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html.unescape(response.content.decode())).split())


def test_the_form_offers_the_slice_fields_and_submits_a_slice_job(client_as, member_a, tray):
    client = client_as(member_a)
    page = client.get(NEW).content.decode()
    assert 'name="mig_profile"' in page and 'name="mig_slices"' in page and 'name="mig_memory_gb"' in page
    response = client.post(NEW, _form(mig_memory_gb="40", mig_slices="2"))
    assert response.status_code == 302, _words(response)[:2000]
    job = Job.objects.get()
    assert (job.gpus, job.mig_profile, job.mig_slices, job.mig_memory_gb) == (0, "2g.47gb", 2, 40)


def test_the_form_refuses_gpus_and_slices_together_beside_the_field(client_as, member_a, tray):
    response = client_as(member_a).post(NEW, _form(gpus="1", mig_profile="1g.23gb"))
    assert response.status_code == 400
    assert "not both" in _words(response) and not Job.objects.exists()


def test_the_preview_names_the_slices_and_the_pass_agrees(client_as, member_a, tray):
    client = client_as(member_a)
    response = client.get(
        PREVIEW,
        {"department": "research", "backend": "slurm", "mig_profile": "3g.93gb"},
        HTTP_HX_REQUEST="true",
    )
    words = _words(response)
    assert 'data-preview="fits"' in response.content.decode(), words
    found = re.search(
        r"It fits now: it would start in quota on (gb-r03-t02 GPU (\d) 3g\.93gb \((MIG-[0-9a-f-]+)\))", words
    )
    assert found, words
    assert not Job.objects.exists()  # a GET writes nothing
    assert client.post(NEW, _form(mig_profile="3g.93gb")).status_code == 302
    run_pass()
    assert [h.mig_uuid for h in _held(Job.objects.get())] == [found.group(3)]


def test_the_preview_says_why_a_slice_job_would_wait_and_when_it_never_could(client_as, member_a, tray):
    client = client_as(member_a)
    ComputeTray.objects.filter(hostname=TRAY).update(state="drain", state_reason="maintenance")
    response = client.get(
        PREVIEW,
        {"department": "research", "backend": "slurm", "mig_profile": "2g.47gb"},
        HTTP_HX_REQUEST="true",
    )
    assert "It would wait: no free 2g.47gb slice: no tray in service offers it." in _words(response)
    response = client.get(
        PREVIEW,
        {"department": "research", "backend": "slurm", "mig_profile": "1g.47gb"},
        HTTP_HX_REQUEST="true",
    )
    assert "no tray's MIG layout offers 1g.47gb" in _words(response)


# --- quota in GPU-equivalents -----------------------------------------------------------------------------


def test_the_quota_api_and_the_department_page_count_slices_in_gpu_equivalents(
    submit, api_as, client_as, member_a, department_a
):
    for fields in ({"mig_profile": "1g.23gb", "mig_slices": 2}, {"mig_profile": "3g.93gb"}):
        assert Job.objects.get(pk=submit(**fields).json()["id"]).state != JobState.PENDING
    make_job(department_a, "whole", JobState.RUNNING, trays=["gb-r01-t01"])
    quota = api_as(member_a).get("/api/v1/departments/research/quota/").json()
    assert (quota["in_use"], quota["slices"]) == (4, 3)
    assert quota["slice_gpu_equivalents"] == round(5 / 7, 4)  # 2 x 1/7 + 3/7
    assert quota["in_use_gpu_equivalents"] == round(4 + 5 / 7, 4)
    page = (
        client_as(member_a).get(reverse("scheduling:department-detail", args=["research"])).content.decode()
    )
    assert '<span class="card-value" data-figure="slices">3</span>' in page
    assert '<span data-figure="slice-equivalents">0.71</span>' in page
    assert '<span data-figure="in-use-equivalents">4.71</span>' in page
    # The next slice job is held to the limit in those units: 4.71 + 3/7 would pass a limit of 5.
    department_a.guaranteed_gpus = department_a.limit_gpus = 5
    department_a.save(update_fields=["guaranteed_gpus", "limit_gpus"])
    waiting = Job.objects.get(pk=submit(mig_profile="3g.93gb").json()["id"])
    assert waiting.pending_reason == (
        "waiting: its department would hold 5.14 GPU-equivalents with it, over its limit of 5"
    )


# --- the tray under a slice job ---------------------------------------------------------------------------


def test_a_slice_job_on_a_failing_tray_is_requeued_and_gives_its_devices_back(
    submit, django_capture_on_commit_callbacks
):
    set_policy(PriorityClass.TRAIN, FaultAction.STOP)
    job = Job.objects.get(pk=submit(mig_profile="2g.47gb").json()["id"])
    assert job.state != JobState.PENDING and _held(job)
    xid_79(ComputeTray.objects.get(hostname=TRAY), django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert job.fault_requeues == 1 and job.state == JobState.PENDING, job.state
    assert not _held(job)  # its MIG devices are free again (the tray is drained: nothing places it there)
    assert job.pending_reason == "waiting: no free 2g.47gb slice: no tray in service offers it"


def test_a_trays_mig_layout_is_not_changed_under_a_slice_job(submit):
    job = Job.objects.get(pk=submit(mig_profile="1g.23gb").json()["id"])
    with pytest.raises(MigLayoutRefused, match=rf"runs job {job.pk} \(serve\)"):
        set_mig_layout(ComputeTray.objects.get(hostname=TRAY).pk, "all-disabled")
    assert ComputeTray.objects.get(hostname=TRAY).mig_layout == "all-balanced"


def test_clone_prefills_whole_gpus_or_slices_as_the_job_asked(client_as, member_a, department_a, tray):
    client = client_as(member_a)
    whole = make_job(department_a, "whole", JobState.COMPLETED, gpus=4, submitted_by=member_a)
    assert client.post(NEW, _form(mig_memory_gb="40", mig_slices="2")).status_code == 302
    by_size = Job.objects.get(mig_slices=2)
    for job, shown, empty in (
        (whole, {"gpus": "4"}, ("mig_profile", "mig_slices", "mig_memory_gb")),
        (by_size, {"mig_memory_gb": "40", "mig_slices": "2"}, ("gpus", "mig_profile")),
    ):
        page = client.get(NEW, {"clone": job.pk}).content.decode()
        for name, value in shown.items():
            assert re.search(rf'name="{name}"[^>]*value="{value}"', page), name
        for name in empty:
            assert not re.search(rf'name="{name}"[^>]*value="[^"]', page), name


def test_the_job_lists_and_the_cancel_question_name_the_slices(submit, client_as, member_a):
    job = Job.objects.get(pk=submit(mig_profile="1g.23gb", mig_slices=2).json()["id"])
    client = client_as(member_a)
    for url in (reverse("scheduling:job-list"), reverse("scheduling:department-detail", args=["research"])):
        assert "<span data-slices>2 \u00d7 <code>1g.23gb</code></span>" in client.get(url).content.decode(), (
            url
        )
    page = client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert "It is stopped and its MIG slices are freed." in html.unescape(page)


# Any JSON in the slice fields: a 201 for a request the rules take, else a 400 naming a field; never a 500,
# and a refusal writes nothing.
_JSON = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["1g.23gb", "2g.47gb", "3g.93gb", "1g.47gb", "7g.186gb", "1g.23gb+me"]),
    st.lists(st.integers(), max_size=2),
)


@pytest.mark.slow(reason="60 generated submissions through the API: about 20 s on 2 cores")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(profile=_JSON, slices=_JSON, memory=_JSON, gpus=st.one_of(st.none(), st.integers(0, 8)))
def test_any_slice_fields_get_a_201_or_a_400_naming_a_field(
    api_as, member_a, tray, profile, slices, memory, gpus
):
    body = {"department": "research", "name": "h", "work": {"script": SCRIPT}}
    for name, value in (
        ("mig_profile", profile),
        ("mig_slices", slices),
        ("mig_memory_gb", memory),
        ("gpus", gpus),
    ):
        if value is not None:
            body[name] = value
    before = Job.objects.count()
    response = api_as(member_a).post("/api/v1/jobs/", body, format="json")
    assert response.status_code in (201, 400), response.content[:500]
    if response.status_code == 400:
        assert set(response.json()) & {"gpus", "mig_profile", "mig_slices", "mig_memory_gb", "priority_class"}
        assert Job.objects.count() == before
    else:
        job = Job.objects.get(pk=response.json()["id"])
        assert (job.gpus == 0) == bool(job.mig_slices) and (job.mig_profile != "") == bool(job.mig_slices)


def test_a_pass_reads_and_words_waiting_slice_jobs_in_queries_that_do_not_grow_with_them(department_a, tray):
    ComputeTray.objects.filter(hostname=TRAY).update(state="drain", state_reason="maintenance")

    def slice_job(n: int) -> Job:
        return Job.objects.create(
            department=department_a,
            name=f"s{n}",
            gpus=0,
            mig_profile="3g.93gb",
            mig_slices=1,
            mig_compute_slices=3,
        )

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            run_pass()
        return len(captured)

    slice_job(0)
    queries()  # the first pass words it (and warms what a pass keeps)
    slice_job(1)
    one = queries()
    for n in range(2, 12):
        slice_job(n)
    assert queries() == one
    assert set(Job.objects.values_list("pending_reason", flat=True)) == {
        "waiting: no free 3g.93gb slice: no tray in service offers it"
    }
