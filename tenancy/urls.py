from django.urls import path

from tenancy import views

app_name = "tenancy"
urlpatterns = [
    path("departments/", views.department_list, name="department-list"),
    path("departments/<slug:slug>/", views.department_detail, name="department-detail"),
    path("departments/<slug:slug>/edit/", views.department_edit, name="department-edit"),
    path("departments/<slug:slug>/members/", views.member_set, name="member-set"),
    path("departments/<slug:slug>/members/<int:pk>/remove/", views.member_remove, name="member-remove"),
    path("dashboard/", views.admin_dashboard, name="admin-dashboard"),
]
