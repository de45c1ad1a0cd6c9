from django.urls import path
from rest_framework.routers import SimpleRouter

from tenancy.api import views

# SimpleRouter: the API root at /api/v1/ belongs to the inventory router (a second root would shadow it).
router = SimpleRouter()
router.register("departments", views.DepartmentViewSet, basename="department")

members = views.DepartmentMemberViewSet.as_view({"get": "list", "post": "create"})
member = views.DepartmentMemberViewSet.as_view(
    {"get": "retrieve", "put": "update", "patch": "partial_update", "delete": "destroy"}
)

urlpatterns = [
    *router.urls,
    path("departments/<slug:department_slug>/members/", members, name="department-member-list"),
    path(
        "departments/<slug:department_slug>/members/<str:username>/", member, name="department-member-detail"
    ),
]
