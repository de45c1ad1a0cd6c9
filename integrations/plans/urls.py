"""The NVLink partition wizard (platform admins): rack, layout, names, preview, apply, progress.

Included by portal/urls.py under /inventory/ in the `inventory` namespace, beside the rack pages it starts
from."""

from django.urls import path

from integrations.plans import views

urlpatterns = [
    path("plans/", views.plan_list, name="plan-list"),
    path("plans/new/", views.pick_rack, name="plan-new"),
    path("plans/<int:pk>/", views.plan_detail, name="plan-detail"),
    path("plans/<int:pk>/cancel/", views.plan_cancel, name="plan-cancel"),
    path("racks/<str:name>/plan/", views.plan_layout, name="plan-layout"),
    path("racks/<str:name>/plan/names/", views.plan_names, name="plan-names"),
    path("racks/<str:name>/plan/preview/", views.plan_preview, name="plan-preview"),
    path("racks/<str:name>/plan/apply/", views.plan_apply, name="plan-apply"),
    path("racks/<str:name>/plan/whatif/", views.plan_whatif, name="plan-whatif"),
    path("plans/whatif/<int:pk>/", views.whatif_detail, name="whatif-detail"),
]
