"""Every department made before default projects gets one (tenancy.Project.is_default): named "Default",
slug "default" (or the first of "default-2", "default-3", ... its named projects leave free), no quota of
its own. Its people are implicit (the department's members in no named project), so no membership rows
are written. Reversible: the way back deletes the default projects (scheduling 0022 takes the jobs out
of them first)."""

from django.db import migrations


def _free(taken: set[str], first: str, pattern: str) -> str:
    """`first`, or the first of pattern.format(2), (3), ... whose lower case is not in `taken`."""
    candidate, n = first, 2
    while candidate.lower() in taken:
        candidate, n = pattern.format(n), n + 1
    return candidate


def add_default_projects(apps, schema_editor):
    Department = apps.get_model("tenancy", "Department")
    Project = apps.get_model("tenancy", "Project")
    for department in Department.objects.exclude(projects__is_default=True).order_by("pk"):
        siblings = Project.objects.filter(department=department)
        names = {name.lower() for name in siblings.values_list("name", flat=True)}
        slugs = set(siblings.values_list("slug", flat=True))
        Project.objects.create(
            department=department,
            name=_free(names, "Default", "Default {}"),
            slug=_free(slugs, "default", "default-{}"),
            is_default=True,
            guaranteed_gpus=0,
            limit_gpus=None,
        )


def remove_default_projects(apps, schema_editor):
    apps.get_model("tenancy", "Project").objects.filter(is_default=True).delete()


class Migration(migrations.Migration):
    dependencies = [("tenancy", "0012_default_project")]

    operations = [migrations.RunPython(add_default_projects, remove_default_projects)]
