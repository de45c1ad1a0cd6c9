"""Projects API (/api/v1/projects/): a department's projects, their quota and their people.

Everyone lists and reads the projects they may see (`Project.objects.visible_to`: admins all, a department's
leads its projects, anyone else the projects they are in). A department's leads and platform admins create,
change and delete its projects and put people in them, take them out and move them between projects
(core.access.require_project_manager); everything goes through tenancy.projects, whose ValidationError is a
400 naming the field. Every change is audited (core.audit).
"""

from django.contrib.auth import get_user_model
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.access import require_project_manager
from core.fields import JSONIntegerField, KnownFieldsOnly, SlugTextField, TextField
from tenancy import projects as service
from tenancy.choices import ProjectRole
from tenancy.models import Department, Project, ProjectMembership

MAX_GPUS = 1_000_000  # far beyond any cluster; keeps the numbers inside the database's integer columns


class ProjectMemberSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = ProjectMembership
        fields = ["username", "role"]
        read_only_fields = fields


class ProjectSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    namespace = serializers.CharField(read_only=True, help_text="Its Kubernetes namespace.")
    account = serializers.CharField(
        read_only=True, help_text="Its Slurm account (a child of the department's)."
    )
    members = ProjectMemberSerializer(source="memberships", many=True, read_only=True)
    is_default = serializers.BooleanField(
        read_only=True,
        help_text="The department's default project: guaranteed what its named projects leave of the "
        "department's guarantee (its own guaranteed_gpus stays 0), used by every member in no named project "
        "(members lists only hand grants: none), run as the department itself (namespace and account). "
        "effective_guaranteed_gpus and effective_members say what it is guaranteed and who uses it.",
    )
    guaranteed_gpus = serializers.IntegerField(
        read_only=True,
        help_text="The guarantee stored on the project (set by a lead). The default project's is always 0: "
        "it is guaranteed the rest of the department's, in effective_guaranteed_gpus.",
    )
    effective_guaranteed_gpus = serializers.SerializerMethodField(
        help_text="What the project is guaranteed: a named project its guaranteed_gpus; the default project "
        "what the named projects leave of its department's guarantee (the rest), as the portal and "
        "`rp quota` show it."
    )
    effective_members = serializers.SerializerMethodField(
        help_text="The usernames of the people whose work the project holds: a named project's members; "
        "the default project's, every member of the department in no named project (computed, not stored)."
    )

    class Meta:
        model = Project
        fields = [
            "id",
            "department",
            "name",
            "slug",
            "is_default",
            "guaranteed_gpus",
            "over_quota_weight",
            "limit_gpus",
            "namespace",
            "account",
            "members",
            "effective_guaranteed_gpus",
            "effective_members",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.IntegerField(min_value=0))
    def get_effective_guaranteed_gpus(self, project: Project) -> int:
        if project.is_default:
            return service.default_guarantee(project.department)
        return project.guaranteed_gpus

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_effective_members(self, project: Project) -> list[str]:
        if project.is_default:
            return service.default_project_usernames(project.department)
        return sorted(m.user.username for m in project.memberships.all())


class ProjectWriteSerializer(KnownFieldsOnly, serializers.Serializer):
    """The fields a lead sets; the service checks what depends on other rows (names, guarantees that fit)."""

    department = SlugTextField(required=False, help_text="The department's slug (on create only).")
    name = TextField(max_length=100, required=False)
    slug = SlugTextField(
        max_length=30, required=False, help_text="Defaults to the name's. Kept once jobs have run under it."
    )
    guaranteed_gpus = JSONIntegerField(min_value=0, max_value=MAX_GPUS, required=False)
    over_quota_weight = serializers.DecimalField(max_digits=6, decimal_places=2, min_value=0, required=False)
    limit_gpus = JSONIntegerField(min_value=0, max_value=MAX_GPUS, required=False, allow_null=True)


class ProjectMemberWriteSerializer(KnownFieldsOnly, serializers.Serializer):
    username = TextField(max_length=150, help_text="A member of the project's department.")
    role = serializers.ChoiceField(choices=ProjectRole.choices, default=ProjectRole.MEMBER)


class ProjectMoveSerializer(KnownFieldsOnly, serializers.Serializer):
    username = TextField(max_length=150)
    to = JSONIntegerField(
        min_value=1, max_value=2**31 - 1, help_text="The id of the sibling project to move them to."
    )


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter(
                "department", str, description="Only this department's projects (its slug).", required=False
            )
        ]
    ),
    create=extend_schema(request=ProjectWriteSerializer, responses={201: ProjectSerializer}),
    update=extend_schema(request=ProjectWriteSerializer, responses=ProjectSerializer),
    partial_update=extend_schema(request=ProjectWriteSerializer, responses=ProjectSerializer),
    destroy=extend_schema(
        responses={204: None, 400: OpenApiResponse(description="The project has jobs on record.")}
    ),
)
class ProjectViewSet(viewsets.ModelViewSet):
    """Projects under departments: guarantee (inside the department's), over-quota weight, limit, people."""

    serializer_class = ProjectSerializer
    permission_classes = [permissions.IsAuthenticated]
    query_parameters = ("department",)  # read by get_queryset (core.filters.operation_parameters)

    def get_queryset(self):
        projects = Project.objects.visible_to(self.request.user).select_related("department")
        department = self.request.query_params.get("department")
        if department:
            projects = projects.filter(department__slug=department)
        return projects.prefetch_related(
            Prefetch("memberships", queryset=ProjectMembership.objects.select_related("user"))
        )

    def _answer(self, project, code=status.HTTP_200_OK):
        return Response(ProjectSerializer(self.get_queryset().get(pk=project.pk)).data, status=code)

    def create(self, request):
        data = ProjectWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        slug = values.pop("department", None)
        errors = {
            field: [_("This field is required.")]
            for field, value in (("department", slug), ("name", values.get("name")))
            if not value
        }
        if errors:
            raise serializers.ValidationError(errors)
        department = Department.objects.visible_to(request.user).filter(slug=slug).first()
        if department is None:
            raise serializers.ValidationError(
                {"department": [_("you are not a member of a department %(slug)s") % {"slug": repr(slug)}]}
            )
        project = service.create_project(request.user, department, **values)
        return self._answer(project, status.HTTP_201_CREATED)

    def update(self, request, pk=None, partial=False):
        project = self.get_object()
        data = ProjectWriteSerializer(data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        if "department" in values and values.pop("department") != project.department.slug:
            raise serializers.ValidationError({"department": [_("a project stays in its department")]})
        project = service.update_project(request.user, project, **values)
        return self._answer(project)

    def partial_update(self, request, pk=None):
        return self.update(request, pk, partial=True)

    def destroy(self, request, pk=None):
        service.delete_project(request.user, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=ProjectMemberWriteSerializer, responses=ProjectSerializer)
    @action(detail=True, methods=["post"], url_path="members")
    def members(self, request, pk=None):
        """Put a member of the department in the project (or change their project role)."""
        project = self.get_object()
        require_project_manager(request.user, project.department, _("change who is in its projects"))
        data = ProjectMemberWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        user = get_user_model().objects.filter(username=data.validated_data["username"]).first()
        if user is None or not user.memberships.filter(department=project.department).exists():
            # The same answer for an unknown username and one outside the department: no probing.
            raise serializers.ValidationError(
                {
                    "username": [
                        _("no member of %(department)s has that username: add them to the department first")
                        % {"department": project.department}
                    ]
                }
            )
        service.set_project_member(request.user, project, user, data.validated_data["role"])
        return self._answer(project)

    @extend_schema(request=None, responses={200: ProjectSerializer})
    @action(detail=True, methods=["delete"], url_path=r"members/(?P<username>[^/]+)")
    def remove_member(self, request, pk=None, username=None):
        """Take a person out of the project (they stay in the department)."""
        project = self.get_object()
        require_project_manager(request.user, project.department, _("change who is in its projects"))
        membership = get_object_or_404(ProjectMembership, project=project, user__username=username)
        service.remove_project_member(request.user, membership)
        return self._answer(project)

    @extend_schema(request=ProjectMoveSerializer, responses=ProjectSerializer)
    @action(detail=True, methods=["post"], url_path="move")
    def move(self, request, pk=None):
        """Move a person from this project to a sibling project (their role goes with them)."""
        project = self.get_object()
        require_project_manager(request.user, project.department, _("move its members between projects"))
        data = ProjectMoveSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = ProjectMembership.objects.filter(
            project=project, user__username=data.validated_data["username"]
        ).first()
        if membership is None:
            raise serializers.ValidationError(
                {"username": [_("nobody of that username is in %(project)s") % {"project": project}]}
            )
        to = Project.objects.filter(pk=data.validated_data["to"], department=project.department).first()
        if to is None:
            raise serializers.ValidationError(
                {"to": [_("%(department)s has no project with that id") % {"department": project.department}]}
            )
        service.move_member(request.user, membership, to)
        return self._answer(to)
