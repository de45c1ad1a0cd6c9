from django.urls import path

from integrations import views

app_name = "integrations"
urlpatterns = [
    path("targets/", views.target_list, name="target-list"),
    path("targets/new/", views.target_create, name="target-create"),
    path("targets/<int:pk>/edit/", views.target_edit, name="target-edit"),
    path("pushes/", views.push_list, name="push-list"),
    path("pushes/<int:pk>/", views.push_detail, name="push-detail"),
    path("pushes/<int:pk>/retry/", views.push_retry, name="push-retry"),
    path("pushes/<int:pk>/again/", views.push_again, name="push-again"),
    path("targets/<int:pk>/test/", views.target_test, name="target-test"),
]
