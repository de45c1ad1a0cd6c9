"""The demo seed gives its people POSIX identities (as an administrator maps them), its jobs their
submitters, and the embedded backend's rendered Slurm requests show whom each job runs as."""

import json

import pytest
from django.conf import settings

from portal.demo.seeding import seed_tenants
from portal.management.commands.seed_demo import adopt_running_jobs
from scheduling.choices import Backend, JobState
from scheduling.models import Job
from tenancy.choices import PosixSource
from tenancy.models import Membership, PosixAccount

pytestmark = pytest.mark.django_db


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_demo_people_have_identities_and_rendered_jobs_show_them(demo_inventory):
    seed_tenants(password="demo-password-1")
    people = set(Membership.objects.values_list("user__username", flat=True))
    accounts = {a.user.username: a for a in PosixAccount.objects.select_related("user")}
    assert people and people <= set(accounts)
    assert len({a.uid for a in accounts.values()}) == len(accounts)  # one uid per person
    assert all(a.source == PosixSource.ADMIN and a.name == a.user.username for a in accounts.values())
    assert adopt_running_jobs() > 0
    job = Job.objects.filter(backend=Backend.SLURM, state=JobState.RUNNING).exclude(backend_id="").first()
    assert job.submitted_by is not None
    rendered = json.loads((settings.RACKPLANE_RENDER_DIR / "jobs" / f"rp-{job.pk}.json").read_text())
    person = accounts[job.submitted_by.username]
    assert rendered["headers"] == {"X-SLURM-USER-NAME": person.name}
    assert (rendered["run_as"]["uid"], rendered["run_as"]["gid"]) == (person.uid, person.gid)
