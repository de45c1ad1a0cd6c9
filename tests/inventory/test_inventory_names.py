"""Inventory names are refused at save when Slurm or Kubernetes cannot take them (inventory.names).

A rack name with a space used to be saved and then stop the push of every target at render time. Now the
rules are the renderers' own: whatever a model validator accepts, the real renderers accept (hypothesis over
random text), and the admin, the database (named check constraints), the partition wizard, the node-report
API and the migration of existing rows all refuse, naming the field.
"""

from __future__ import annotations

import importlib
import string

import pytest
from django.apps import apps as django_apps
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from integrations import state as configstate
from integrations.kubernetes.render import NodeSpec, PartitionSpec, RackSpec, partition_flavor_name
from integrations.slurm.render import SlurmNode, render_node_lines, render_topology_conf
from integrations.slurm.topology import SlurmBlock
from inventory import names
from inventory.models import ComputeTray, NVLinkPartition, Rack
from tests.factories import token_client

# Characters that make names interesting for the consumers: case, separators, hostlist syntax, whitespace,
# a newline (a new slurm.conf line), non-ASCII look-alikes.
NAME_TEXT = st.text(alphabet=string.ascii_letters[:6] + "09-._ ,[]\n\u00e9/", min_size=0, max_size=70)
ADVERSARIAL = [
    "gb-r01", "r1", "a", "A", "Gb-R01", "gb r01", "gb_r01", "gb.r01", "-a", "a-", "a..b", "a.-b", "",
    "gb-r01\n", "a,b", "a[1-2]", "x" * 63, "x" * 64, "rack/1", "r\u00e9", "1", "1.2.3.4",
]  # fmt: skip


def _accepted(validator, value) -> bool:
    try:
        validator(value)
    except ValidationError:
        return False
    return True


# --- whatever is saved is rendered -------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=300, deadline=None)
@given(name=st.one_of(NAME_TEXT, st.sampled_from(ADVERSARIAL)), partition=st.sampled_from(["p1", "default"]))
def test_a_rack_name_the_model_accepts_is_one_every_renderer_takes(name, partition):
    field = Rack._meta.get_field("name")
    if not _accepted(field.run_validators, name) or not name:
        assert names.rack_name_error(name) is not None
        return
    RackSpec(name)  # the rackplane.io/rack label value
    spec = PartitionSpec(name, partition, 1)
    partition_flavor_name(spec)  # the Kueue ResourceFlavor name (lower-cased <rack>.<partition>)
    short = configstate.short_rack_names([name])[name]
    block = configstate.block_name(short, partition, 1)
    render_topology_conf([SlurmBlock(block, name, ("gb-r01-t01",))])  # BlockName
    assert len(name) <= 63


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=300, deadline=None)
@given(hostname=st.one_of(NAME_TEXT, st.sampled_from(ADVERSARIAL)))
def test_a_hostname_the_model_accepts_is_one_slurm_and_kubernetes_take(hostname):
    field = ComputeTray._meta.get_field("hostname")
    if not _accepted(field.run_validators, hostname) or not hostname:
        assert names.hostname_error(hostname) is not None
        return
    NodeSpec(hostname, "gb-r01")  # the Kubernetes node name
    RackSpec(hostname)  # a label value too (kubernetes.io/hostname): the same rule as a rack's name,
    render_node_lines([SlurmNode(hostname=hostname, gpus=4, cpus=144)])  # NodeName
    render_topology_conf([SlurmBlock("r01", "gb-r01", (hostname,))])
    assert len(hostname) <= 63


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=300, deadline=None)
@given(name=st.one_of(NAME_TEXT, st.sampled_from(ADVERSARIAL)))
def test_a_partition_name_the_model_accepts_is_one_every_renderer_takes(name):
    field = NVLinkPartition._meta.get_field("name")
    if not _accepted(field.run_validators, name) or not name:
        assert names.partition_name_error(name) is not None
        return
    spec = PartitionSpec("gb-r01", name, 1)
    partition_flavor_name(spec)
    render_topology_conf([SlurmBlock(configstate.block_name("r01", name, 1), "gb-r01", ("gb-r01-t01",))])
    assert len(name) <= 31


@pytest.mark.parametrize(
    ("rule", "value", "words"),
    [
        (names.rack_name_error, "gb r01", "lower-case letters"),
        (names.rack_name_error, "GB-R01", "lower case"),
        (names.rack_name_error, "gb-r01-", "ending with a letter or digit"),
        (names.rack_name_error, "x" * 64, "at most 63"),
        (names.hostname_error, "gb-r01-t01\n", "lower-case letters"),
        (names.hostname_error, "gb-r01-t[01-02]", "lower-case letters"),
        (names.hostname_error, "Node1", "lower case"),
        (names.partition_name_error, "p1-", "ending with a letter or digit"),
        (names.partition_name_error, "p" * 32, "at most 31"),
    ],
)
def test_each_refusal_says_what_to_type(rule, value, words):
    assert words in rule(value)


@pytest.mark.parametrize("name", ["gb-r01", "r1", "rack-007", "x" * 63])
def test_the_names_in_use_stay_valid(name):
    assert names.rack_name_error(name) is None
    assert names.hostname_error(f"{name}-t01"[-63:].lstrip("-")) is None
    assert names.hostname_error("gb-r01-c01-node01.hall-a") is None  # a site's longer hostname


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_the_demo_and_the_fixtures_names_are_valid(demo_inventory):
    for rack in Rack.objects.all():
        rack.full_clean()
    for partition in NVLinkPartition.objects.all():
        partition.full_clean()
    for tray in ComputeTray.objects.all():
        tray.full_clean()


# --- refused at save, naming the field ----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_model_refuses_on_the_field_and_the_database_by_its_named_constraints(demo_inventory):
    rack = Rack.objects.get(name="gb-r01")
    tray = rack.trays.get(slot=1)
    partition = rack.partitions.get()
    for obj, field, value in (
        (rack, "name", "gb r01"),
        (tray, "hostname", "GB-R01-T01"),
        (partition, "name", "p 1"),
        (partition, "service_tier", "research"),
    ):
        before = getattr(obj, field)
        setattr(obj, field, value)
        with pytest.raises(ValidationError) as refused:
            obj.full_clean()
        assert field in refused.value.message_dict, refused.value.message_dict
        setattr(obj, field, before)
    for model, pk, changes, constraint in (
        (Rack, rack.pk, {"name": "gb r01"}, "inventory_rack_name_form"),
        (ComputeTray, tray.pk, {"hostname": "gb-r01-t01\nNodeName=x"}, "inventory_computetray_hostname_form"),
        (NVLinkPartition, partition.pk, {"name": "P1"}, "inventory_nvlinkpartition_name_form"),
        (
            NVLinkPartition,
            partition.pk,
            {"service_tier": "research"},
            "inventory_nvlinkpartition_service_tier_form",
        ),
    ):
        with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
            model.objects.filter(pk=pk).update(**changes)


@pytest.mark.django_db
def test_the_admin_shows_the_refusal_on_the_name(client, admin_user):
    client.force_login(admin_user)
    form = {"name": "Rack 1", "system_model": "gb200_nvl72", "cluster_uuid": "", "location": ""}
    response = client.post("/admin/inventory/rack/add/", form)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "lower case" in " ".join(errors["name"]), errors
    assert not Rack.objects.exists()
    response = client.post("/admin/inventory/rack/add/", {**form, "name": "rack-1"})
    assert response.status_code == 302
    assert Rack.objects.filter(name="rack-1").exists()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_the_admin_shows_the_refusal_on_a_tray_hostname(client, admin_user, demo_inventory):
    client.force_login(admin_user)
    tray = ComputeTray.objects.get(hostname="gb-r01-t01")
    response = client.get(f"/admin/inventory/computetray/{tray.pk}/change/")
    form = response.context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    data = {k: ("" if v is None else v) for k, v in data.items()}
    data["ib_port_guids"] = form["ib_port_guids"].value() or "[]"
    for key in ("fabric_problems", "last_report", "scheduler_state"):
        if key in data:
            data[key] = form[key].value() or ("null" if key == "last_report" else "[]")
    data["hostname"] = "gb-r01 t01"
    response = client.post(f"/admin/inventory/computetray/{tray.pk}/change/", data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "hostname" in errors and "Slurm NodeName" in " ".join(errors["hostname"]), errors
    assert ComputeTray.objects.filter(pk=tray.pk, hostname="gb-r01-t01").exists()


@pytest.mark.django_db
def test_a_node_report_from_a_host_that_cannot_be_a_tray_is_a_400_naming_the_host(node_agent):
    response = token_client(node_agent).post(
        "/api/v1/discovery/reports/", {"host": "GB-R01-T01", "gpus": []}, format="json"
    )
    assert response.status_code == 400, response.content
    assert "cannot be a compute tray's hostname" in " ".join(response.json()["host"]), response.json()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_the_wizard_refuses_a_partition_name_a_flavor_cannot_take(demo_inventory):
    from integrations.plans import service as plans
    from inventory.planning import PlannedPartition

    rack = Rack.objects.get(name="gb-r01")
    result = plans.check(rack, [PlannedPartition("p1-", tuple(range(1, 19)))], drain=False)
    assert not result.ok
    assert any("'p1-' is not a usable partition name" in f.message for f in result.findings)


# --- existing rows: the migration refuses, listing them -----------------------------------------------------


@pytest.mark.django_db
def test_the_migration_lists_every_saved_name_a_consumer_cannot_take(demo_inventory):
    if connection.vendor != "sqlite":
        pytest.skip("writes rows around the check constraints with SQLite's ignore_check_constraints")
    migration = importlib.import_module("inventory.migrations.0012_inventory_names_for_consumers")
    migration.check_existing_names(django_apps, None)  # the demo: fine
    rack = Rack.objects.get(name="gb-r02")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA ignore_check_constraints = ON")
    try:
        Rack.objects.filter(pk=rack.pk).update(name="GB R02")
        ComputeTray.objects.filter(hostname="gb-r01-t01").update(hostname="gb_r01_t01")
        NVLinkPartition.objects.filter(rack=rack, name="p1").update(service_tier="interactive")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA ignore_check_constraints = OFF")
    with pytest.raises(RuntimeError) as refused:
        migration.check_existing_names(django_apps, None)
    message = str(refused.value)
    assert "rack 'GB R02'" in message
    assert "compute tray 'gb_r01_t01'" in message
    assert "service tier 'interactive'" in message and "gpu_<name>" in message
