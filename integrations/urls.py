"""Integrations' pages, in the `integrations` namespace: configuration targets and pushes, and the pages whose
actions or figures go through an outside system: tray actions (they tell the schedulers), a job's logs (read
from its backend), a department's settings (saving one queues a push) and the partition wizard
(integrations.plans.urls).

Paths are whole (included by portal/urls.py at the root) and unchanged for users.
"""

from django.urls import path

from integrations.plans import urls as plan_urls
from integrations.views import departments, job_logs, targets, tray_actions

app_name = "integrations"
urlpatterns = [
    path("scheduling/targets/", targets.target_list, name="target-list"),
    path("scheduling/targets/new/", targets.target_create, name="target-create"),
    path("scheduling/targets/<int:pk>/edit/", targets.target_edit, name="target-edit"),
    path("scheduling/targets/<int:pk>/test/", targets.target_test, name="target-test"),
    path("scheduling/targets/versions/", targets.target_versions, name="versions"),
    path("scheduling/pushes/", targets.push_list, name="push-list"),
    path("scheduling/pushes/<int:pk>/", targets.push_detail, name="push-detail"),
    path("scheduling/pushes/<int:pk>/retry/", targets.push_retry, name="push-retry"),
    path("scheduling/pushes/<int:pk>/again/", targets.push_again, name="push-again"),
    path("scheduling/jobs/<int:pk>/logs/", job_logs.job_logs, name="job-logs"),
    path("inventory/trays/<int:pk>/drain/", tray_actions.tray_drain, name="tray-drain"),
    path("inventory/trays/<int:pk>/return/", tray_actions.tray_return, name="tray-return"),
    path("inventory/trays/<int:pk>/maintenance/", tray_actions.tray_maintenance, name="tray-maintenance"),
    path("inventory/trays/<int:pk>/mig-layout/", tray_actions.tray_mig_layout, name="tray-mig-layout"),
    path("inventory/trays/<int:pk>/mig-layout/whatif/", tray_actions.tray_mig_whatif, name="tray-mig-whatif"),
    path("inventory/racks/<str:name>/trays/", tray_actions.tray_bulk, name="tray-bulk"),
    path("inventory/racks/<str:name>/trays/result/", tray_actions.tray_bulk_result, name="tray-bulk-result"),
    path("tenancy/departments/<slug:slug>/edit/", departments.department_edit, name="department-edit"),
    *plan_urls.urlpatterns,
]
