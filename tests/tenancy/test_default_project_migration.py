"""The migrations that give every department made before default projects its default project (tenancy
0013) and move its jobs without a project into it (scheduling 0022), and their way back.

On an empty database of its own (tests/scratch_database.py): migrated forward to just before them (and
only what that depends on), filled through the historical models, migrated forward and read through today's
models, then back again. The suite's test database is never migrated back (unapplying the rest of the
project and applying it again took half a minute on 2 cores)."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tenancy.models import Project

BEFORE = [("tenancy", "0012_default_project"), ("scheduling", "0021_job_search_indexes")]
AFTER = [
    ("tenancy", "0013_default_projects_for_departments"),
    ("scheduling", "0022_jobs_in_default_projects"),
]


def _migrate(executor: MigrationExecutor, targets) -> MigrationExecutor:
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


def _fill(old_apps) -> dict:
    Department = old_apps.get_model("tenancy", "Department")
    Project = old_apps.get_model("tenancy", "Project")
    Job = old_apps.get_model("scheduling", "Job")

    def department(n: int, slug: str):
        return Department.objects.create(
            name=slug.title(),
            slug=slug,
            guaranteed_gpus=16,
            vlan_id=100 + n,
            vxlan_vni=5000 + n,
            ib_pkey=0x100 + n,
            network_cidr=f"10.{n}.0.0/24",
            export_path=f"/export/{slug}",
        )

    plain, split = department(1, "plain"), department(2, "split")
    # A department that already has projects, one of them slugged "default" and one named "Default 2"
    # in another case: the default project takes the first free name and slug.
    taken = Project.objects.create(department=split, name="default", slug="default", guaranteed_gpus=8)
    Project.objects.create(department=split, name="DEFAULT 2", slug="llm", guaranteed_gpus=4)
    job = dict(gpus=4, topology="any", priority_class="train", backend="embedded", time_limit_minutes=60)
    return {
        "plain_jobs": [
            Job.objects.create(department=plain, name=f"p{n}", state="running", **job).pk for n in (1, 2)
        ],
        "split_loose": Job.objects.create(department=split, name="old", state="completed", **job).pk,
        "split_named": Job.objects.create(department=split, name="named", project=taken, **job).pk,
        "taken": taken.pk,
    }


@pytest.mark.slow(reason="migrates a database forward, back and forth")
@pytest.mark.django_db(transaction=True)
def test_existing_departments_get_a_default_project_holding_their_project_less_jobs_and_back(
    scratch_database,
):
    executor = MigrationExecutor(connection)
    executor = _migrate(executor, BEFORE)
    ids = _fill(executor.loader.project_state(BEFORE).apps)
    executor = _migrate(executor, AFTER)
    # The jobs as they were then (today's Job has columns of later migrations); the projects' table is
    # today's.
    Job = executor.loader.project_state(AFTER).apps.get_model("scheduling", "Job")

    defaults = {p.department.slug: p for p in Project.objects.filter(is_default=True)}
    assert set(defaults) == {"plain", "split"}
    assert (defaults["plain"].name, defaults["plain"].slug) == ("Default", "default")
    # "default" and "default 2" were taken in split (names compared in any case): the next free ones.
    assert (defaults["split"].name, defaults["split"].slug) == ("Default 3", "default-2")
    assert all(p.guaranteed_gpus == 0 and p.limit_gpus is None for p in defaults.values())
    # Its jobs without a project are the default project's; a named project's stay there.
    assert set(Job.objects.filter(pk__in=ids["plain_jobs"]).values_list("project", flat=True)) == {
        defaults["plain"].pk
    }
    assert Job.objects.get(pk=ids["split_loose"]).project_id == defaults["split"].pk
    assert Job.objects.get(pk=ids["split_named"]).project_id == ids["taken"]
    assert not Job.objects.filter(project__isnull=True).exists()
    # It runs as its department: same namespace and account as before it existed.
    assert defaults["plain"].namespace == defaults["plain"].account == "plain"

    # The way back: the jobs have no project again, the default projects are gone, the rest stays.
    executor = _migrate(executor, BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    assert not old.get_model("tenancy", "Project").objects.filter(is_default=True).exists()
    assert old.get_model("tenancy", "Project").objects.count() == 2
    old_jobs = old.get_model("scheduling", "Job").objects
    assert set(old_jobs.filter(project__isnull=True).values_list("pk", flat=True)) == {
        *ids["plain_jobs"],
        ids["split_loose"],
    }
    assert old_jobs.get(pk=ids["split_named"]).project_id == ids["taken"]
