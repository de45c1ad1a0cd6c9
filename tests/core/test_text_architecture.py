"""Rules that make the text rule and strict bodies hard to forget, in the style of
tests/test_architecture.py: they walk what the project declares, so a new endpoint or field is covered
without anyone listing it.

- Every serializer a write endpoint (POST/PUT/PATCH) reads its body with, nested ones included, refuses
  unknown fields (core.fields.KnownFieldsOnly).
- Every writable string field in them is held to the text rule: core.text.TextField (= core.fields.TextField),
  a field with core.text.TextValidator (a model field's, copied by a ModelSerializer), or a field whose
  format already admits no such characters (slug, regex, e-mail, URL, UUID, IP address, choices).
- Every model CharField/TextField of the project's apps carries core.text.TextValidator, or is listed below
  with the reason it does not need it (it is written by Rackplane, or checked by a stricter validator).
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import models
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.plumbing import ComponentRegistry
from drf_spectacular.settings import spectacular_settings
from rest_framework import serializers

from core.fields import KnownFieldsOnly
from core.text import TextField, TextValidator

pytestmark = pytest.mark.slow(reason="walks every API endpoint and serializer of the project")

WRITE_METHODS = ("POST", "PUT", "PATCH")
FORMAT_CHECKED = (
    serializers.SlugField,
    serializers.RegexField,
    serializers.EmailField,
    serializers.URLField,
    serializers.UUIDField,
    serializers.IPAddressField,
)
APPS = ("core", "inventory", "tenancy", "scheduling", "integrations", "portal")


def request_serializers():
    """(endpoint, serializer instance) for every write operation of the API, as drf-spectacular sees it."""
    generator = SchemaGenerator()
    generator._initialise_endpoints()
    found = []
    for path, path_regex, method, view in generator._get_paths_and_endpoints():
        if method.upper() not in WRITE_METHODS:
            continue
        view.request = spectacular_settings.GET_MOCK_REQUEST(method, path, view, None)
        schema = view.schema
        schema.registry, schema.path, schema.path_regex = ComponentRegistry(), path, path_regex
        schema.path_prefix, schema.method = "", method.upper()
        request = schema.get_request_serializer()
        # A body per media type ({"text/plain": ...}): the serializers among them.
        for serializer in request.values() if isinstance(request, dict) else [request]:
            if serializer is None:
                continue
            kinds = getattr(serializer, "serializers", None) or [serializer]  # a polymorphic body: each kind
            for one in kinds.values() if isinstance(kinds, dict) else kinds:
                if isinstance(one, type) and issubclass(one, serializers.BaseSerializer):
                    one = one()
                if isinstance(one, serializers.BaseSerializer):
                    found.append((f"{method.upper()} {path}", one))
    return found


def walk(serializer, where: str):
    """(where, field) for every writable field of `serializer` and of the serializers nested in it."""
    if isinstance(serializer, serializers.ListSerializer):
        serializer = serializer.child
    yield where, serializer
    for name, field in serializer.fields.items():
        if field.read_only:
            continue
        here = f"{where}.{name}"
        while isinstance(field, (serializers.ListField, serializers.DictField, serializers.ListSerializer)):
            field = field.child
        if isinstance(field, serializers.BaseSerializer):
            yield from walk(field, here)
        else:
            yield here, field


@pytest.fixture(scope="module")
def endpoints(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        return request_serializers()


def test_the_walk_sees_the_write_endpoints(endpoints):
    assert len(endpoints) >= 12
    assert any(where.startswith("POST /api/v1/jobs/") for where, _ in endpoints)


def test_every_request_serializer_refuses_unknown_fields(endpoints):
    open_ = sorted(
        f"{where} ({type(item).__name__})"
        for endpoint, serializer in endpoints
        for where, item in walk(serializer, endpoint)
        if isinstance(item, serializers.BaseSerializer) and not isinstance(item, KnownFieldsOnly)
    )
    assert not open_, f"request serializers without core.fields.KnownFieldsOnly: {open_}"


def test_every_writable_string_field_is_held_to_the_text_rule(endpoints):
    loose = sorted(
        f"{where} ({type(field).__name__})"
        for endpoint, serializer in endpoints
        for where, field in walk(serializer, endpoint)
        if isinstance(field, serializers.CharField)
        and not isinstance(field, (TextField, *FORMAT_CHECKED))
        and not any(isinstance(v, TextValidator) for v in field.validators)
    )
    assert not loose, (
        "writable string fields that take any character: declare them as core.text.TextField (multiline=True "
        f"for scripts) or give the model field core.text.TextValidator(): {loose}"
    )


# Model text fields without the validator, each with why. Written by Rackplane (not typed by anyone): logs,
# errors, hashes, generated names; or held to a stricter validator of its own (a CIDR, a path, a URL).
NOT_TYPED = {
    "core.AuditEvent": {"actor_name", "object_type", "object_id", "object_repr"},  # copies of checked values
    "core.PersonalToken": {"prefix", "key_hash"},  # generated
    "core.NotificationSubscription": {"secret", "scope"},  # generated / a choice list
    "core.Notification": {"destination", "subject", "error"},  # built by Rackplane
    "core.NotificationAttempt": {"message"},
    "core.InboxItem": {"subject", "link"},
    # reports; mig_layout: a choice from inventory.mig_layouts' catalogue, held to its name rule
    "inventory.ComputeTray": {"hostname", "reported_clique", "agent_version", "state_reason", "mig_layout"},
    "inventory.Gpu": {"uuid", "serial", "product", "fabric_status"},  # node reports: TextField in the API
    "inventory.MigDevice": {"uuid", "profile"},  # node reports, held to inventory.discovery.mig's own rule
    "inventory.NVLinkPartition": {"degraded_reason"},
    "inventory.PartitionPlan": {"base_layout", "error", "reason"},  # reason: the scheduler's sentence
    "inventory.AgentToken": {"prefix", "secret_hash", "hostname"},
    "inventory.HealthRule": {"code"},
    "inventory.HealthSettings": {"return_check"},
    "inventory.HealthEvent": {"gpu_uuid", "code", "mnemonic", "message"},
    "inventory.HealthAction": {"rule_name", "reason"},
    "inventory.ServiceRecord": {"gpu_uuid"},  # a copy of the GPU row's uuid (inventory.health.service)
    "inventory.HealthCheckResult": {"name", "output"},  # node reports (inventory.discovery.faults)
    "tenancy.Department": {"network_cidr", "export_path"},  # a CIDR; tenancy.validators.validate_export_path
    "tenancy.GroupRoleRule": {"group"},  # the directory's group name, matched exactly
    "tenancy.ExternalIdentity": {"subject"},  # the identity provider's
    "tenancy.PosixAccount": {"name"},  # core.posix's own rule
    "tenancy.TenancySettings": {"tenant_supernet", "export_root", "nfs_server"},  # own validators
    "tenancy.MetricsSource": {
        "bearer_token",
        "username",
        "password",
        "ca_file",
        "metric",
        "uuid_label",
        "gpu_label",
        "hostname_label",
        "selector",
        "last_error",
    },  # credentials and PromQL (checked against the source), errors
    "tenancy.ExporterEndpoint": {"last_error"},
    "scheduling.Job": {
        "pending_reason",
        "backend_id",
        "backend_message",
        "requeue_note",
        "idempotency_key",
        "idempotency_fingerprint",
        "qos",  # set by integrations.dispatch from tenancy.naming, never typed
        "mig_profile",  # a profile name, held to inventory.validators.validate_mig_profile
    },
    # Copies of a MigDevice row's node-reported UUID and profile (inventory.discovery.mig's own rule).
    "scheduling.SliceAllocation": {"mig_uuid", "profile"},
    "scheduling.FaultPolicy": {"signal"},
    "scheduling.JobEvent": {"message"},
    "scheduling.BackendCancel": {"backend_id", "reason", "error"},
    "scheduling.SchedulingRequest": {"reason"},
    "scheduling.WhatIfRun": {"rack", "tray", "error"},
    "scheduling.WhatIfLayout": {"error"},
    "integrations.ConfigTarget": {"kind"},
    "integrations.ConfigPush": {"payload_hash", "log", "error", "reason"},
    # Rendered configuration text, stored by its sha256 (integrations.contents): never typed by anyone.
    "integrations.ConfigPiece": {"digest", "text"},
}


def test_every_model_text_field_has_the_validator_or_a_reason():
    missing = []
    for model in apps.get_models():
        label = model._meta.label
        if model._meta.app_label not in APPS:
            continue
        for field in model._meta.get_fields():
            if (
                not isinstance(field, (models.CharField, models.TextField))
                or field.choices
                or not field.editable
            ):
                continue
            if isinstance(
                field, (models.SlugField, models.URLField, models.EmailField, models.GenericIPAddressField)
            ):
                continue
            if any(isinstance(v, TextValidator) for v in field.validators):
                continue
            if field.name not in NOT_TYPED.get(label, set()):
                missing.append(f"{label}.{field.name}")
    assert not missing, (
        "model text fields without core.text.TextValidator(): add it (a migration follows), or list the "
        "field "
        f"in NOT_TYPED with the reason it is not typed by anyone: {missing}"
    )
