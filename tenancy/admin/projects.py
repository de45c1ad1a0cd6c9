"""Admin of projects and their people, saved through tenancy.projects (guarantees that fit the
department's, names, members of the department)."""

from django.contrib import admin

from tenancy.admin.checked import ServiceCheckedForm
from tenancy.labels import labels_for
from tenancy.models import Project, ProjectMembership
from tenancy.projects import create_project, delete_project, set_project_member, update_project

PROJECT_FIELDS = ["name", "slug", "guaranteed_gpus", "over_quota_weight", "limit_gpus"]


def _save_project(user, instance: Project) -> Project:
    values = {name: getattr(instance, name) for name in PROJECT_FIELDS}
    if instance.pk:
        return update_project(user, Project.objects.get(pk=instance.pk), **values)
    return create_project(user, instance.department, **values)


class ProjectAdminForm(ServiceCheckedForm):
    saved_by = None  # the admin saving it (ProjectAdmin.get_form)

    class Meta:
        model = Project
        fields = ["department", *PROJECT_FIELDS]
        labels = labels_for(Project)

    def run_service(self, instance):
        _save_project(self.saved_by, instance)


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    form = ProjectAdminForm
    list_display = ["name", "department", "slug", "guaranteed_gpus", "over_quota_weight", "limit_gpus"]
    list_filter = ["department"]
    search_fields = ["name", "slug", "department__name"]
    list_select_related = ["department"]

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        form.saved_by = request.user
        return form

    def get_readonly_fields(self, request, obj=None):
        return ["department"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        project = _save_project(request.user, obj)
        obj.pk, obj.created_at, obj.updated_at = project.pk, project.created_at, project.updated_at
        obj._state.adding = False

    def delete_model(self, request, obj):
        delete_project(request.user, obj)


class ProjectMembershipAdminForm(ServiceCheckedForm):
    saved_by = None  # the admin saving it (ProjectMembershipAdmin.get_form)

    class Meta:
        model = ProjectMembership
        fields = ["user", "project", "role"]
        labels = labels_for(ProjectMembership)

    def run_service(self, instance):
        set_project_member(self.saved_by, instance.project, instance.user, instance.role)


@admin.register(ProjectMembership)
class ProjectMembershipAdmin(admin.ModelAdmin):
    form = ProjectMembershipAdminForm
    list_display = ["user", "project", "role", "origin", "created_at"]
    list_filter = ["role", "origin", "project__department"]
    search_fields = ["user__username", "project__name"]
    list_select_related = ["user", "project__department"]
    autocomplete_fields = ["user"]

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        form.saved_by = request.user
        return form

    def save_model(self, request, obj, form, change):
        membership = set_project_member(request.user, obj.project, obj.user, obj.role)
        obj.pk, obj.created_at = membership.pk, membership.created_at
        obj._state.adding = False
