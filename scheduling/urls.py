"""Scheduling's pages, in the `scheduling` namespace: jobs (list, page, form, resubmit, utilization), and the
pages that show jobs or usage beside inventory and tenancy: the rack view, the jobs that held a GPU or a tray,
utilization charts, departments with their members, people and projects, and the admin dashboard.

Paths are whole (included by portal/urls.py at the root) and unchanged for users: the rack view stays at
/inventory/racks/<name>/ and the department pages at /tenancy/departments/.
"""

from django.urls import path

from scheduling.views import (
    departments,
    fabric,
    gpu_life,
    job_form,
    jobs,
    people,
    projects,
    racks,
    utilization,
)

app_name = "scheduling"
urlpatterns = [
    # Jobs.
    path("scheduling/jobs/", jobs.job_list, name="job-list"),
    path("scheduling/jobs/new/", job_form.job_new, name="job-new"),
    path("scheduling/jobs/new/preview/", job_form.job_preview, name="job-preview"),
    path("scheduling/jobs/<int:pk>/", jobs.job_detail, name="job-detail"),
    path("scheduling/jobs/<int:pk>/cancel/", jobs.job_cancel, name="job-cancel"),
    path("scheduling/jobs/<int:pk>/resubmit/", gpu_life.job_resubmit, name="job-resubmit"),
    path("scheduling/jobs/<int:pk>/utilization/", utilization.job_utilization, name="job-utilization"),
    # Racks, GPUs and trays with the jobs on them.
    path("inventory/racks/<str:name>/", racks.rack_detail, name="rack-detail"),
    # The compute fabric above the racks, with free GPUs per scalable unit (imported on inventory's page).
    path("inventory/fabric/", fabric.fabric, name="fabric"),
    path("inventory/gpus/<int:pk>/utilization/", utilization.gpu_utilization, name="gpu-utilization"),
    path("inventory/gpus/<int:pk>/jobs/", gpu_life.held_jobs, {"kind": "gpu"}, name="gpu-held-jobs"),
    path("inventory/trays/<int:pk>/jobs/", gpu_life.held_jobs, {"kind": "tray"}, name="tray-held-jobs"),
    path("inventory/trays/<int:pk>/utilization/", gpu_life.tray_utilization, name="tray-utilization"),
    path("inventory/gpus/<int:pk>/slices/", gpu_life.slices, {"kind": "gpu"}, name="gpu-slices"),
    path("inventory/trays/<int:pk>/slices/", gpu_life.slices, {"kind": "tray"}, name="tray-slices"),
    # Departments, their members, people and projects.
    path("tenancy/departments/", departments.department_list, name="department-list"),
    path("tenancy/departments/<slug:slug>/", departments.department_detail, name="department-detail"),
    path("tenancy/departments/<slug:slug>/members/", departments.member_set, name="member-set"),
    path(
        "tenancy/departments/<slug:slug>/members/<int:pk>/remove/",
        departments.member_remove,
        name="member-remove",
    ),
    path("tenancy/departments/<slug:slug>/people/search/", people.people_search, name="people-search"),
    path("tenancy/departments/<slug:slug>/quota-chart/", gpu_life.quota_chart, name="quota-chart"),
    path("tenancy/departments/<slug:slug>/projects/", projects.project_create, name="project-create"),
    path(
        "tenancy/departments/<slug:slug>/projects/confirm/",
        projects.project_create_confirm,
        name="project-create-confirm",
    ),
    path(
        "tenancy/departments/<slug:slug>/project-people/confirm/",
        projects.project_people_confirm,
        name="project-people-confirm",
    ),
    path(
        "tenancy/departments/<slug:slug>/projects/<int:pk>/", projects.project_update, name="project-update"
    ),
    path(
        "tenancy/departments/<slug:slug>/projects/<int:pk>/confirm/",
        projects.project_update_confirm,
        name="project-update-confirm",
    ),
    path(
        "tenancy/departments/<slug:slug>/projects/<int:pk>/delete/",
        projects.project_delete,
        name="project-delete",
    ),
    path(
        "tenancy/departments/<slug:slug>/projects/<int:pk>/people/",
        projects.project_member_set,
        name="project-member-set",
    ),
    path(
        "tenancy/departments/<slug:slug>/project-people/<int:pk>/move/",
        projects.project_member_move,
        name="project-member-move",
    ),
    path(
        "tenancy/departments/<slug:slug>/project-people/<int:pk>/move/confirm/",
        projects.project_member_move_confirm,
        name="project-member-move-confirm",
    ),
    path(
        "tenancy/departments/<slug:slug>/project-people/<int:pk>/remove/",
        projects.project_member_remove,
        name="project-member-remove",
    ),
    path(
        "tenancy/departments/<slug:slug>/project-people/<int:pk>/remove/confirm/",
        projects.project_member_remove_confirm,
        name="project-member-remove-confirm",
    ),
    path("tenancy/dashboard/", departments.admin_dashboard, name="admin-dashboard"),
]
