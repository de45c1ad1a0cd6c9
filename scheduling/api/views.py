"""Jobs API: submit (with Idempotency-Key), list and read what `visible_to` allows, cancel."""

from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from core.fields import refuse_body
from scheduling.api.serializers import (
    JobDetailSerializer,
    JobSerializer,
    JobSubmitRequest,
    JobSubmitSerializer,
    job_submit_examples,
)
from scheduling.filters import JobFilter
from scheduling.models import Job
from scheduling.services.actions import cancel_job, may_cancel
from scheduling.services.admission import IdempotencyKeyReused, submission, submit_job

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Any unique string (e.g. a UUID). A retried submission with the same key and the same body "
    "returns the first job (200) instead of making a second one; the key with a different body is a 422.",
)
MAX_KEY = 200


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Jobs: a gang of GPUs for a department, admitted against its quota and placed topology-aware.

    A pending job's `pending_reason` says why it waits, in plain words.
    """

    filterset_class = JobFilter
    sort_fields = {  # core.tables.SortFilter
        "id": ("pk",),
        "name": ("name",),
        "project": ("project__name",),
        "gpus": ("gpus",),
        "state": ("state",),
        "created": ("created_at",),
        "started": ("started_at",),
    }

    def get_queryset(self):
        queryset = Job.objects.visible_to(self.request.user).select_related(
            "department", "submitted_by", "project"
        )
        if self.action == "retrieve":
            queryset = queryset.prefetch_related("events")
        return queryset.order_by("-created_at", "-pk")

    def get_serializer_class(self):
        if self.action == "create":
            return JobSubmitSerializer
        if self.action == "retrieve":
            return JobDetailSerializer
        return JobSerializer

    @extend_schema(
        parameters=[IDEMPOTENCY_KEY],
        request=JobSubmitRequest,
        examples=job_submit_examples(),
        responses={
            201: JobDetailSerializer,
            200: OpenApiResponse(
                JobDetailSerializer, description="The job an earlier request with this Idempotency-Key made."
            ),
            422: OpenApiResponse(
                description="The Idempotency-Key was used for another request: the `Idempotency-Key` message "
                "names the key and the job it made."
            ),
        },
    )
    def create(self, request):
        key = request.headers.get("Idempotency-Key", "").strip()
        if not key and "Idempotency-Key" in request.headers:
            # An empty key is not "no key": the client meant to retry safely and would get a second job.
            return Response(
                {"Idempotency-Key": [_("empty: send a key (e.g. a UUID) or leave the header out")]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        if len(key) > MAX_KEY:
            return Response(
                {"Idempotency-Key": [_("at most %(n)s characters") % {"n": MAX_KEY}]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        # Header bytes beyond ASCII arrive decoded as Latin-1 (WSGI): C1 controls and mojibake that would be
        # stored as the key. A key is printable ASCII (a UUID, a hash), as the IETF draft's sf-string is.
        if not (key.isascii() and key.isprintable()):
            return Response(
                {"Idempotency-Key": [_("use printable ASCII characters only (e.g. a UUID)")]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        # A retry is validated for its shape only (not against today's memberships or capacity), then
        # compared with the first request: the same one gets the first job, another one a 422.
        context = {"request": request, "retried_job": submission(request.user, key)}
        serializer = JobSubmitSerializer(data=request.data, context=context)
        serializer.is_valid(raise_exception=True)
        try:
            job, created = submit_job(user=request.user, idempotency_key=key, **serializer.validated_data)
        except IdempotencyKeyReused as error:
            return Response({"Idempotency-Key": [str(error)]}, status=status.HTTP_422_UNPROCESSABLE_ENTITY)
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(self._detail(job), status=code)

    def _detail(self, job):
        job = (
            Job.objects.prefetch_related("events").select_related("department", "submitted_by").get(pk=job.pk)
        )
        return JobDetailSerializer(job, context={"request": self.request}).data

    @extend_schema(
        request=None,
        responses={
            200: JobDetailSerializer,
            400: OpenApiResponse(description="The job has already ended: it cannot be cancelled."),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel a pending or running job (its submitter, its department's leads, staff)."""
        refuse_body(request)
        job = self.get_object()
        if not may_cancel(request.user, job):
            raise PermissionDenied(
                _("only the job's submitter, its department's leads and staff may cancel it")
            )
        job = cancel_job(job, request.user)  # its ValidationError: a 400 (core.api.exception_handler)
        return Response(self._detail(job))
