from django.urls import path

from inventory import views

app_name = "inventory"
urlpatterns = [
    path("racks/", views.rack_list, name="rack-list"),
    path("racks/<str:name>/", views.rack_detail, name="rack-detail"),
    path("gpus/<int:pk>/", views.gpu_detail, name="gpu-detail"),
    path("trays/<int:pk>/", views.tray_detail, name="tray-detail"),
]
