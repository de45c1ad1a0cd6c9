"""The jobs that ran without a project (all of a department's before it had projects, and its work from
before its first project) move into their department's default project (tenancy 0013), which the
scheduler, Slurm and Kubernetes treat as the department's own work: nothing about them changes but the
name of their project. Reversible: the way back takes them out of the default projects again."""

from django.db import migrations


def into_default_projects(apps, schema_editor):
    Job = apps.get_model("scheduling", "Job")
    Project = apps.get_model("tenancy", "Project")
    for department_id, project_id in Project.objects.filter(is_default=True).values_list("department_id", "pk"):
        Job.objects.filter(department_id=department_id, project__isnull=True).update(project_id=project_id)


def out_of_default_projects(apps, schema_editor):
    apps.get_model("scheduling", "Job").objects.filter(project__is_default=True).update(project=None)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0021_job_search_indexes"),
        ("tenancy", "0013_default_projects_for_departments"),
    ]

    operations = [migrations.RunPython(into_default_projects, out_of_default_projects)]
