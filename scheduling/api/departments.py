"""Tenancy API: departments (admins write, everyone reads what they may see), members, fair-share position.

Every viewset starts from `Model.objects.visible_to(user)`; writes go through tenancy.services. A list page
is a fixed number of queries: the usage figures are `scheduling.usage.department_positions` (the one count
the dashboards, the home page, the quota endpoint and the quota snapshots read), dedicated partitions one
prefetch.
"""

from django.db.models import Count, IntegerField, OuterRef, Prefetch, ProtectedError, Subquery
from django.db.models.functions import Coalesce
from django.shortcuts import get_object_or_404
from django.utils.functional import cached_property
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response

from core.access import IsAdminOrReadOnly, require_lead
from inventory.models import Gpu
from scheduling.usage import department_positions
from scheduling.views.people import identity_lock
from tenancy.api.serializers import (
    DepartmentSerializer,
    MembershipCreateSerializer,
    MembershipRoleSerializer,
    MembershipSerializer,
    QuotaSerializer,
)
from tenancy.filters import DepartmentFilter, MembershipFilter
from tenancy.models import DedicatedPartition, Department, Membership
from tenancy.services import remove_membership, set_membership


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = _("The request conflicts with the current state.")
    default_code = "conflict"


def quota_position(department: Department) -> dict:
    """The department's fair-share position now, as the dashboards compute it (scheduling.usage)."""
    positions = department_positions()
    position = positions.of(department)
    return {
        "department": department.slug,
        "capacity": positions.capacity,
        "guaranteed": position.guaranteed,
        "limit": department.limit_gpus,
        "in_use": position.in_use,
        "in_quota": position.in_quota,
        "borrowed": position.borrowed,
        "pending_demand": position.pending_demand,
        "fair_share": position.fair_share,
        "entitled_in_quota": position.fair_share - position.over_quota_share,
        "entitled_over_quota": position.over_quota_share,
        "reclaimable": position.reclaimable,
        "starved": position.starved,
        "slices": position.slices,
        "slice_gpu_equivalents": round(position.slice_equivalents, 4),
        "in_use_gpu_equivalents": round(position.in_use_equivalents, 4),
    }


class DepartmentWrites(IsAdminOrReadOnly):
    """core.access's rule, with the reason in the API's words."""

    message = _("Only platform admins may create, change or delete departments.")


@extend_schema_view(
    destroy=extend_schema(
        responses={204: None, 409: OpenApiResponse(description="The department still has jobs.")}
    )
)
class DepartmentViewSet(viewsets.ModelViewSet):
    """Departments (tenants): GPU guarantee, over-quota weight and limit, network and storage isolation.

    Everyone lists and reads the departments they belong to (platform admins: all); only platform admins
    create, change or delete. Isolation values left out are allocated from the pools; guarantees may not
    exceed the schedulable healthy GPUs. Looked up by slug.
    """

    serializer_class = DepartmentSerializer
    filterset_class = DepartmentFilter
    permission_classes = [permissions.IsAuthenticated, DepartmentWrites]
    lookup_field = "slug"

    def get_queryset(self):
        gpus = (
            Gpu.objects.filter(tray__partition=OuterRef("partition"))
            .order_by()
            .values("tray__partition")
            .annotate(n=Count("pk"))
            .values("n")
        )
        dedicated = (
            DedicatedPartition.objects.select_related("partition__rack")
            .annotate(gpu_count=Coalesce(Subquery(gpus, output_field=IntegerField()), 0))
            .order_by("partition__rack__name", "partition__clique_id")
        )
        return Department.objects.visible_to(self.request.user).prefetch_related(
            Prefetch("dedicated_partitions", queryset=dedicated)
        )

    @cached_property
    def positions(self):
        """Every department's figures (scheduling.usage.department_positions), read once per request, when
        the first department is shown (after a write: with it)."""
        return department_positions()

    def get_serializer_context(self):
        # Each department's usage figures come from them (DepartmentSerializer.to_representation).
        return {**super().get_serializer_context(), "positions": lambda: self.positions}

    def _reload(self, serializer):
        # The response shows the usage annotations and partitions of the saved row.
        serializer.instance = self.get_queryset().get(pk=serializer.instance.pk)

    def perform_create(self, serializer):
        serializer.save()
        self._reload(serializer)

    def perform_update(self, serializer):
        serializer.save()
        self._reload(serializer)

    def perform_destroy(self, instance):
        try:
            instance.delete()
        except ProtectedError as error:
            jobs = len(error.protected_objects)
            raise Conflict(
                ngettext(
                    "%(name)s still has %(jobs)s job on record: a department with jobs cannot be deleted",
                    "%(name)s still has %(jobs)s jobs on record: a department with jobs cannot be deleted",
                    jobs,
                )
                % {"name": instance.name, "jobs": jobs}
            ) from error

    @extend_schema(responses=QuotaSerializer, filters=False)
    @action(detail=True, methods=["get"], serializer_class=QuotaSerializer, filterset_class=None)
    def quota(self, request, slug=None):
        """The department's fair-share position now: guarantee, limit, use, fair share, reclaim."""
        department = self.get_object()
        return Response(QuotaSerializer(quota_position(department)).data)


DEPARTMENT_SLUG = OpenApiParameter(
    "department_slug", OpenApiTypes.STR, OpenApiParameter.PATH, description="The department's slug."
)
USERNAME = OpenApiParameter("username", OpenApiTypes.STR, OpenApiParameter.PATH, description="A username.")


@extend_schema_view(
    list=extend_schema(parameters=[DEPARTMENT_SLUG]),
    retrieve=extend_schema(parameters=[DEPARTMENT_SLUG, USERNAME]),
    create=extend_schema(
        parameters=[DEPARTMENT_SLUG],
        request=MembershipCreateSerializer,
        responses={201: MembershipSerializer, 200: MembershipSerializer},
    ),
    update=extend_schema(
        parameters=[DEPARTMENT_SLUG, USERNAME],
        request=MembershipRoleSerializer,
        responses=MembershipSerializer,
    ),
    partial_update=extend_schema(
        parameters=[DEPARTMENT_SLUG, USERNAME],
        request=MembershipRoleSerializer,
        responses=MembershipSerializer,
    ),
    destroy=extend_schema(
        parameters=[DEPARTMENT_SLUG, USERNAME],
        responses={204: None, 400: OpenApiResponse(description="The last lead cannot be removed.")},
    ),
)
class DepartmentMemberViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet
):
    """A department's members and their roles.

    Leads of the department and platform admins (core.access.leads) add members (POST; an existing member
    gets the new role), change roles and remove members; the last lead cannot be removed. Leads add active
    accounts that are not platform admins: any other username, known or not, gets the same 400. Others who
    belong to the department read what they may see of it; a department you do not belong to is not found.
    """

    serializer_class = MembershipSerializer
    filterset_class = MembershipFilter
    lookup_field = "user__username"
    lookup_url_kwarg = "username"

    @cached_property
    def department(self) -> Department:
        return get_object_or_404(
            Department.objects.visible_to(self.request.user), slug=self.kwargs["department_slug"]
        )

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no request user, no department
            return Membership.objects.none()
        return (
            Membership.objects.visible_to(self.request.user)
            .filter(department=self.department)
            .select_related("user", "department")
        )

    def create(self, request, department_slug=None):
        require_lead(request.user, self.department)  # a department you cannot see: 404 first
        serializer = MembershipCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        username, role = serializer.validated_data["username"], serializer.validated_data["role"]
        existing = Membership.objects.filter(department=self.department, user__username=username).first()
        existed = existing is not None
        self._refuse_identity_role(existing, "role")
        membership = set_membership(self.department, username, role, by=request.user)  # ValidationError: 400
        return Response(
            MembershipSerializer(membership).data,
            status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED,
        )

    def update(self, request, department_slug=None, username=None, partial=False):
        require_lead(request.user, self.department)  # a department you cannot see: 404 first
        membership = self.get_object()
        self._refuse_identity_role(membership, "role")
        serializer = MembershipRoleSerializer(data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        role = serializer.validated_data.get("role", membership.role)
        membership = set_membership(self.department, membership.user.username, role, by=request.user)
        return Response(MembershipSerializer(membership).data)

    def partial_update(self, request, department_slug=None, username=None):
        return self.update(request, department_slug, username, partial=True)

    def destroy(self, request, department_slug=None, username=None):
        require_lead(request.user, self.department)  # a department you cannot see: 404 first
        return super().destroy(request, department_slug=department_slug, username=username)

    @staticmethod
    def _refuse_identity_role(membership, field: str) -> None:
        """A role from an identity provider follows the person's groups there (the portal's page says the
        same): 400 naming why, nothing changed."""
        if locked := identity_lock(membership):
            raise ValidationError({field: [locked]})

    def perform_destroy(self, instance):
        self._refuse_identity_role(instance, "username")
        remove_membership(instance)
