"""The NVLink partition wizard (platform admins): rack, layout, names, preview, apply, progress.

Part of integrations.urls (the `integrations` namespace: a plan's apply goes through the fabric manager and
the
schedulers), under /inventory/ beside the rack pages it starts from."""

from django.urls import path

from integrations.plans import busy_views, progress_views, views, whatif_views

urlpatterns = [
    path("inventory/plans/", progress_views.plan_list, name="plan-list"),
    path("inventory/plans/new/", views.pick_rack, name="plan-new"),
    path("inventory/plans/<int:pk>/", progress_views.plan_detail, name="plan-detail"),
    path("inventory/plans/<int:pk>/cancel/", progress_views.plan_cancel, name="plan-cancel"),
    path("inventory/racks/<str:name>/plan/", views.plan_layout, name="plan-layout"),
    path("inventory/racks/<str:name>/plan/names/", views.plan_names, name="plan-names"),
    path("inventory/racks/<str:name>/plan/preview/", views.plan_preview, name="plan-preview"),
    path("inventory/racks/<str:name>/plan/apply/", views.plan_apply, name="plan-apply"),
    path("inventory/racks/<str:name>/plan/requeue/", busy_views.plan_requeue, name="plan-requeue"),
    path("inventory/racks/<str:name>/plan/schedule/", busy_views.plan_schedule, name="plan-schedule"),
    path("inventory/racks/<str:name>/plan/whatif/", whatif_views.plan_whatif, name="plan-whatif"),
    path("inventory/plans/whatif/<int:pk>/", whatif_views.whatif_detail, name="whatif-detail"),
]
