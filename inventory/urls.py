from django.urls import path

from inventory import views, wizard_views

app_name = "inventory"
urlpatterns = [
    path("racks/", views.rack_list, name="rack-list"),
    path("racks/<str:name>/", views.rack_detail, name="rack-detail"),
    path("gpus/<int:pk>/", views.gpu_detail, name="gpu-detail"),
    path("trays/<int:pk>/", views.tray_detail, name="tray-detail"),
    # The NVLink partition wizard (admins): rack, layout, names, preview, apply, progress.
    path("plans/", wizard_views.plan_list, name="plan-list"),
    path("plans/new/", wizard_views.pick_rack, name="plan-new"),
    path("plans/<int:pk>/", wizard_views.plan_detail, name="plan-detail"),
    path("plans/<int:pk>/cancel/", wizard_views.plan_cancel, name="plan-cancel"),
    path("racks/<str:name>/plan/", wizard_views.plan_layout, name="plan-layout"),
    path("racks/<str:name>/plan/names/", wizard_views.plan_names, name="plan-names"),
    path("racks/<str:name>/plan/preview/", wizard_views.plan_preview, name="plan-preview"),
    path("racks/<str:name>/plan/apply/", wizard_views.plan_apply, name="plan-apply"),
]
