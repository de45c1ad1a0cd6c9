"""Configuration pushes (integrations.pushes, scheduling.tasks, the pages): row first, task on commit,
idempotent, one active push per target, transient vs permanent errors, the directory target's versions."""

from __future__ import annotations

import errno
import os
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import IntegrityError, connection, transaction
from django.urls import reverse
from django.utils import timezone

from core.models import AuditSource
from integrations import push_runs, pushes, tasks
from integrations.contents import payload_of
from integrations.directory import adapter as directory_adapter
from integrations.fabric import adapter as fabric_adapter
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from integrations.registry import clean_settings
from inventory.models import Gpu
from tenancy.models import Department
from tenancy.services import save_department

pytestmark = pytest.mark.django_db

TOKEN = "k8s-secret-token-do-not-show"


@pytest.fixture
def local(local_target, demo_inventory) -> ConfigTarget:
    """The embedded directory target (tests/conftest.py), writing into render_dir, with the demo inventory
    to render."""
    return local_target


def test_the_data_migration_creates_the_local_directory_target(db):
    from django.db.migrations.executor import MigrationExecutor

    migration = MigrationExecutor(connection).loader.get_migration(
        "scheduling", "0004_local_directory_target"
    )
    assert migration is not None
    target = ConfigTarget.objects.filter(name="local").first()
    if target is not None:  # absent only after a transactional test flushed the tables
        assert (target.kind, target.enabled, target.settings) == ("directory", True, {"path": "", "keep": 5})


def push_now(django_capture_on_commit_callbacks, **kwargs) -> list[ConfigPush]:
    kwargs.setdefault("reason", "test")
    with django_capture_on_commit_callbacks(execute=True):
        created = pushes.queue_pushes(**kwargs)
    for push in created:
        push.refresh_from_db()
    return created


def change_state(name: str = "Vision") -> Department:
    return save_department(Department(name=name, slug=name.lower(), guaranteed_gpus=4))


def current(render_dir: Path) -> Path:
    return (render_dir / "current").resolve()


def fake_scontrol(tmp_path: Path, *, up: bool, reconfigure: str = "ok") -> str:
    """A stand-in scontrol: `ping` answers UP or DOWN; `reconfigure` succeeds or fails with a parse error."""
    script = tmp_path / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  ping) echo 'Slurmctld(primary) at ctl is {'UP' if up else 'DOWN'}'; exit {0 if up else 1} ;;\n"
        "  reconfigure) "
        + (
            "exit 0 ;;\n"
            if reconfigure == "ok"
            else "echo 'scontrol: error: Parse error in file rackplane.conf line 2' >&2; exit 1 ;;\n"
        )
        + "  *) echo 'Unable to contact slurm controller (connect failure)' >&2; exit 1 ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    return str(script)


@pytest.fixture
def slurm_dir(tmp_path) -> Path:
    conf = tmp_path / "etc-slurm"
    conf.mkdir()
    (conf / "rackplane.conf").write_text("# the previous rackplane.conf\n")
    (conf / "topology.conf").write_text("# the previous topology.conf\n")
    return conf


def slurm_target(conf: Path, scontrol: str) -> ConfigTarget:
    return ConfigTarget.objects.create(
        name="slurm-test", kind="slurm", settings={"config_dir": str(conf), "scontrol": scontrol}
    )


# --- row first, then the task ----------------------------------------------------------------------


def test_the_row_is_saved_first_and_the_task_queued_on_commit(
    local, monkeypatch, django_capture_on_commit_callbacks
):
    seen = []
    monkeypatch.setattr(
        tasks.push_config,
        "delay",
        lambda pk: seen.append(ConfigPush.objects.values_list("pk", "status").get(pk=pk)),
    )
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        [push] = pushes.queue_pushes(reason="first push", user=None)
        assert ConfigPush.objects.get(pk=push.pk).status == PushStatus.QUEUED
        assert seen == []  # nothing is sent before the transaction commits
    assert len(callbacks) == 1
    callbacks[0]()
    assert seen == [(push.pk, PushStatus.QUEUED)]
    push.refresh_from_db()
    assert push.payload_hash == pushes.payload_hash(push.payload)
    assert set(payload_of(push.payload)) == {"files"}
    assert "slurm/topology.conf" in payload_of(push.payload)["files"]


def test_push_to_the_local_directory(local, render_dir, admin_user, django_capture_on_commit_callbacks):
    [push] = push_now(django_capture_on_commit_callbacks, user=admin_user, reason="make run")

    assert push.status == PushStatus.SUCCEEDED
    assert push.attempts == 1
    assert push.requested_by == admin_user
    assert push.started_at and push.finished_at
    files = payload_of(push.payload)["files"]
    live = current(render_dir)
    assert {str(p.relative_to(live)) for p in live.rglob("*") if p.is_file()} == set(files)
    assert (live / "slurm/topology.conf").read_text() == files["slurm/topology.conf"]
    lines = push.log.splitlines()
    assert all(line[:4].isdigit() and line[10] == " " for line in lines)  # timestamped
    assert "queued: make run" in lines[0]
    assert "succeeded" in lines[-1]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_an_unchanged_configuration_is_not_pushed_again(
    local, render_dir, django_capture_on_commit_callbacks
):
    [first] = push_now(django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        [second] = pushes.queue_pushes(reason="again")

    assert callbacks == []  # no task at all
    second.refresh_from_db()
    assert second.status == PushStatus.SUCCEEDED
    assert second.payload_hash == first.payload_hash
    assert "unchanged" in second.log
    assert len(list((render_dir / "versions").iterdir())) == 1
    # --force pushes it anyway (e.g. to repair hand-made changes on the target).
    [forced] = push_now(django_capture_on_commit_callbacks, force=True)
    assert forced.status == PushStatus.SUCCEEDED
    assert "(forced)" in forced.log and "unchanged: the target's last" not in forced.log
    assert len(list((render_dir / "versions").iterdir())) == 2


def test_re_running_a_finished_push_does_nothing(local, monkeypatch, django_capture_on_commit_callbacks):
    [push] = push_now(django_capture_on_commit_callbacks)
    applied = []
    monkeypatch.setattr(directory_adapter.DirectoryAdapter, "apply", lambda *a: applied.append(a) or "")

    outcome = tasks.push_config(push.pk)

    assert outcome["status"] == PushStatus.SUCCEEDED
    assert applied == []
    assert ConfigPush.objects.get(pk=push.pk).attempts == 1


def test_claim_is_atomic(local):
    push = ConfigPush.objects.create(target=local, payload={"files": {}})
    assert push_runs.claim(push.pk) is True
    assert push_runs.claim(push.pk) is False
    push.refresh_from_db()
    assert (push.status, push.attempts) == (PushStatus.RUNNING, 1)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent writers need PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_two_workers_claiming_at_once_one_wins(render_dir):
    target = ConfigTarget.objects.create(name="concurrent", kind="directory", settings={})
    push = ConfigPush.objects.create(target=target, payload={"files": {}})
    barrier = threading.Barrier(2)
    results = []

    def worker():
        try:
            barrier.wait()
            results.append(push_runs.claim(push.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False, True]


def test_a_retry_that_is_not_due_is_not_claimed(local):
    push = ConfigPush.objects.create(
        target=local, payload={}, next_attempt_at=timezone.now() + timedelta(minutes=1)
    )
    assert push_runs.claim(push.pk) is False


def test_a_newer_push_supersedes_a_queued_one(local, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as first_callbacks:
        [first] = pushes.queue_pushes(reason="first")
    change_state()
    with django_capture_on_commit_callbacks(execute=False) as second_callbacks:
        [second] = pushes.queue_pushes(reason="second")

    first.refresh_from_db()
    assert first.status == PushStatus.SUPERSEDED
    assert first.superseded_by_id == second.pk
    assert f"superseded by push #{second.pk}" in first.log
    # The first message still arrives: it finds nothing to do.
    first_callbacks[0]()
    first.refresh_from_db()
    assert (first.status, first.attempts) == (PushStatus.SUPERSEDED, 0)
    second_callbacks[0]()
    second.refresh_from_db()
    assert second.status == PushStatus.SUCCEEDED
    assert "vision" in payload_of(second.payload)["files"]["nfs/exports"]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_change_during_a_running_push_is_pushed_after_it(
    local, monkeypatch, django_capture_on_commit_callbacks
):
    original = directory_adapter.DirectoryAdapter.apply
    during = []

    def apply(self, payload, log, push):
        if push.reason == "first":  # another admin changes something while this push runs
            change_state()
            during.extend(pushes.queue_pushes(reason="second"))
            assert ConfigTarget.objects.get(pk=local.pk).follow_up["reason"] == "second"
        return original(self, payload, log, push)

    monkeypatch.setattr(directory_adapter.DirectoryAdapter, "apply", apply)
    push_now(django_capture_on_commit_callbacks, reason="first")

    assert during == []  # no second row while the first runs
    first, second = ConfigPush.objects.order_by("pk")
    assert first.status == second.status == PushStatus.SUCCEEDED
    assert "a newer change arrived (second)" in first.log
    assert second.reason == "second (waited for the previous push)"
    assert "vision" in payload_of(second.payload)["files"]["nfs/exports"]
    assert ConfigTarget.objects.get(pk=local.pk).follow_up is None


def test_one_active_push_per_target_is_a_database_constraint(local):
    ConfigPush.objects.create(target=local, status=PushStatus.QUEUED)
    for status in (PushStatus.QUEUED, PushStatus.RUNNING):
        with pytest.raises(IntegrityError), transaction.atomic():
            ConfigPush.objects.create(target=local, status=status)
    # Finished pushes do not count.
    ConfigPush.objects.create(target=local, status=PushStatus.SUCCEEDED)
    ConfigPush.objects.create(target=local, status=PushStatus.FAILED)


# --- errors -------------------------------------------------------------------------------------------


def test_a_transient_error_leaves_the_push_queued_with_a_retry_note(
    demo_inventory, slurm_dir, tmp_path, django_capture_on_commit_callbacks
):
    target = slurm_target(slurm_dir, fake_scontrol(tmp_path, up=False))
    before = {p.name: p.read_text() for p in slurm_dir.iterdir()}

    [push] = push_now(django_capture_on_commit_callbacks, targets=[target])

    assert push.status == PushStatus.QUEUED
    assert push.attempts == 1
    assert push.next_attempt_at > timezone.now()
    assert "slurmctld does not answer" in push.error
    assert "retrying" in push.error and "retry_stale_pushes" in push.error
    assert "transient error" in push.log
    assert {p.name: p.read_text() for p in slurm_dir.iterdir() if not p.name.startswith(".")} == before

    # Not due yet: the beat leaves it alone. Due: it is tried again (the controller is still down).
    assert tasks.retry_stale_pushes()["sent"] == []
    ConfigPush.objects.filter(pk=push.pk).update(next_attempt_at=timezone.now())
    assert tasks.retry_stale_pushes()["sent"] == [push.pk]
    push.refresh_from_db()
    assert (push.status, push.attempts) == (PushStatus.QUEUED, 2)

    # After the last attempt it fails, saying so.
    ConfigPush.objects.filter(pk=push.pk).update(
        attempts=push_runs.MAX_ATTEMPTS - 1, next_attempt_at=timezone.now()
    )
    tasks.retry_stale_pushes()
    push.refresh_from_db()
    assert push.status == PushStatus.FAILED
    assert f"gave up after {push_runs.MAX_ATTEMPTS} attempts" in push.error
    assert "What to do:" in push.error


def test_a_worker_schedules_the_retry_with_exponential_backoff(
    demo_inventory, slurm_dir, tmp_path, monkeypatch, django_capture_on_commit_callbacks
):
    target = slurm_target(slurm_dir, fake_scontrol(tmp_path, up=False))
    with django_capture_on_commit_callbacks(execute=False):
        [push] = pushes.queue_pushes(reason="test", targets=[target])
    sent = []
    monkeypatch.setattr(tasks, "_can_schedule_retry", lambda task: True)
    monkeypatch.setattr(
        tasks.push_config, "apply_async", lambda args, countdown: sent.append((args, countdown))
    )

    tasks.push_config(push.pk)
    ConfigPush.objects.filter(pk=push.pk).update(next_attempt_at=timezone.now())
    tasks.push_config(push.pk)

    assert sent == [((push.pk,), 2), ((push.pk,), 4)]
    assert "retrying in 4s (attempt 3 of 5)" in ConfigPush.objects.get(pk=push.pk).log


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_permanent_error_fails_and_leaves_the_previous_files(
    demo_inventory, slurm_dir, tmp_path, django_capture_on_commit_callbacks
):
    target = slurm_target(slurm_dir, fake_scontrol(tmp_path, up=True, reconfigure="parse error"))
    before = {p.name: p.read_text() for p in slurm_dir.iterdir()}

    [push] = push_now(django_capture_on_commit_callbacks, targets=[target])

    assert push.status == PushStatus.FAILED
    assert push.attempts == 1
    assert "does not parse" in push.error
    assert "What to do:" in push.error
    assert pushes.what_to_do(push.error).startswith("fix the configuration")
    assert {p.name: p.read_text() for p in slurm_dir.iterdir() if p.name in before} == before


def test_a_state_the_scheduler_cannot_express_fails_at_once(local, django_capture_on_commit_callbacks):
    from inventory.models import ComputeTray, NVLinkPartition, Rack

    rack = Rack.objects.get(name="gb-r03")
    ComputeTray.objects.filter(rack=rack).update(partition=None)
    NVLinkPartition.objects.filter(rack=rack).delete()
    for number, start in enumerate((1, 7, 13), 1):
        partition = NVLinkPartition.objects.create(rack=rack, clique_id=number, name=f"p{number}")
        ComputeTray.objects.filter(rack=rack, slot__gte=start, slot__lt=start + 6).update(partition=partition)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        [push] = pushes.queue_pushes(reason="3x6")

    assert callbacks == []
    assert push.status == PushStatus.FAILED
    assert "cannot be rendered" in push.error and "Slurm 24.11 cannot express" in push.error
    assert "What to do:" in push.error


def test_invalid_target_settings_fail_the_push_and_a_retry_pushes_again(
    local, admin_client_logged_in, django_capture_on_commit_callbacks
):
    ConfigTarget.objects.filter(pk=local.pk).update(settings={"path": "", "keep": 0})
    [push] = push_now(django_capture_on_commit_callbacks)
    assert push.status == PushStatus.FAILED
    assert "settings are not valid: keep: must be between 1 and 100" in push.error

    ConfigTarget.objects.filter(pk=local.pk).update(settings={"path": "", "keep": 3})
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client_logged_in.post(reverse("integrations:push-retry", args=[push.pk]))
    retried = ConfigPush.objects.latest("pk")
    assert response.status_code == 302
    assert response["Location"] == reverse("integrations:push-detail", args=[retried.pk])
    assert retried.reason == f"retry of push #{push.pk}"
    assert retried.status == PushStatus.SUCCEEDED
    assert ConfigPush.objects.get(pk=push.pk).status == PushStatus.FAILED  # the failed row stays as it was


def test_a_push_whose_worker_was_lost_is_requeued(local, django_capture_on_commit_callbacks):
    push = ConfigPush.objects.create(target=local, payload={"files": {"a.txt": "a\n"}}, payload_hash="x")
    assert push_runs.claim(push.pk)
    ConfigPush.objects.filter(pk=push.pk).update(updated_at=timezone.now() - timedelta(hours=1))

    result = tasks.retry_stale_pushes()

    assert result["requeued"] == [push.pk] and result["sent"] == [push.pk]
    push.refresh_from_db()
    assert push.status == PushStatus.SUCCEEDED
    assert push.attempts == 2
    assert "requeued" in push.log


def test_the_task_runs_as_the_requesting_user(
    local, admin_user, monkeypatch, django_capture_on_commit_callbacks
):
    from core import audit

    seen = []
    monkeypatch.setattr(
        directory_adapter.DirectoryAdapter,
        "apply",
        lambda self, payload, log, push: seen.append(audit._current()) or "ok",
    )
    push_now(django_capture_on_commit_callbacks, user=admin_user)
    assert [(c.source, c.actor) for c in seen] == [(AuditSource.TASK, admin_user)]


# --- the directory target ----------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_directory_versions_are_switched_atomically_and_the_previous_one_is_kept(
    local, render_dir, monkeypatch, django_capture_on_commit_callbacks
):
    [first] = push_now(django_capture_on_commit_callbacks, reason="one")
    v1 = current(render_dir)
    change_state()
    [second] = push_now(django_capture_on_commit_callbacks, reason="two")
    v2 = current(render_dir)

    assert v1 != v2
    assert (v1 / "nfs/exports").read_text() == payload_of(first.payload)["files"]["nfs/exports"]
    assert (v2 / "nfs/exports").read_text() == payload_of(second.payload)["files"]["nfs/exports"] != ""
    # Unchanged files are shared with the previous version (hard links), changed ones are new.
    assert os.path.samefile(v1 / "slurm/topology.conf", v2 / "slurm/topology.conf")
    assert not os.path.samefile(v1 / "nfs/exports", v2 / "nfs/exports")
    assert (render_dir / "current").is_symlink()

    # A push that fails half way through writing leaves `current` on the previous version, and no debris.
    written = []
    original = directory_adapter._write_file

    def fail_on_third(path, text):
        written.append(path)
        if len(written) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        original(path, text)

    monkeypatch.setattr(directory_adapter, "_write_file", fail_on_third)
    change_state("Robotics")
    [third] = push_now(django_capture_on_commit_callbacks, reason="three")

    assert third.status == PushStatus.FAILED
    assert "No space left on device" in third.error
    assert "writable" in pushes.what_to_do(third.error)
    assert current(render_dir) == v2
    assert sorted(p.name for p in (render_dir / "versions").iterdir()) == sorted([v1.name, v2.name])


def test_directory_keeps_only_the_configured_previous_versions(
    local, render_dir, django_capture_on_commit_callbacks
):
    local.settings = {"path": "", "keep": 1}
    local.save()
    for number in range(3):
        push_now(django_capture_on_commit_callbacks, force=True, reason=f"push {number}")
    versions = sorted(p.name for p in (render_dir / "versions").iterdir())
    assert len(versions) == 2
    assert current(render_dir).name == versions[-1]


def test_directory_paths(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.RACKPLANE_RENDER_DIR = tmp_path / "default"
    assert directory_adapter.directory_path({"path": ""}) == tmp_path / "default"
    assert directory_adapter.directory_path({"path": "rendered/site-a"}) == tmp_path / "rendered/site-a"
    assert directory_adapter.directory_path({"path": "/srv/rackplane"}) == Path("/srv/rackplane")


# --- the other adapters ------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_simulated_fabric_push_reports_progress_per_rack(demo_inventory, django_capture_on_commit_callbacks):
    target = ConfigTarget.objects.create(name="fabric", kind="fabric", settings={"kind": "simulated"})
    # The simulated fabric starts as the nodes last reported; gb-r02's nodes have not reported a clique yet.
    Gpu.objects.filter(tray__rack__name="gb-r02").update(reported_cluster_uuid=None, reported_clique_id=None)

    [push] = push_now(django_capture_on_commit_callbacks, targets=[target])

    assert push.status == PushStatus.SUCCEEDED, push.error
    assert "gb-r02: step 1/2 done: create partition p1: 36 GPUs" in push.log
    assert "1 rack(s) changed, 2 already as planned" in push.log
    fabric = fabric_adapter.simulated_fabric(target.pk)
    assert len(fabric.domains()) == 3
    # The fabric now runs the inventory's partitions: a forced push changes nothing.
    [again] = push_now(django_capture_on_commit_callbacks, targets=[target], force=True)
    assert "0 rack(s) changed, 3 already as planned" in again.log


@pytest.fixture
def k8s(demo_inventory, kube, kube_proxy, kube_testbed) -> ConfigTarget:
    """A Kubernetes target on the testbed's real API server (through the proxy), with the `rackplane` service
    account's token and the cluster CA; the inventory's nodes registered as their kubelets would."""
    from integrations import state as configstate

    for node in configstate.build_state().kubernetes.inventory.nodes:
        kube.register_node(node.hostname)
    settings = {"api_url": kube_proxy.url, "token": kube_testbed.token, "ca_file": kube_testbed.ca}
    return ConfigTarget.objects.create(
        name="k8s", kind="kubernetes", settings=clean_settings("kubernetes", settings)
    )


def live(kube, obj: dict):
    meta = obj["metadata"]
    return kube.get(obj["kind"], meta["name"], meta.get("namespace", ""))


@pytest.mark.integration
def test_kubernetes_push_through_the_api_and_the_token_is_never_shown(
    k8s, kube, kube_proxy, kube_testbed, admin_client_logged_in, django_capture_on_commit_callbacks
):
    change_state("Vision")
    [push] = push_now(django_capture_on_commit_callbacks, targets=[k8s])
    assert push.status == PushStatus.SUCCEEDED, push.error
    assert "0 deleted" in push.log and "created" in push.log and "not registered" not in push.log

    objects = push.payload["objects"]
    assert {"Node", "Topology", "Namespace", "ClusterQueue", "LocalQueue"} <= {o["kind"] for o in objects}
    for obj in objects:
        found = live(kube, obj)
        assert found is not None, obj["metadata"]
        managers = {(m["manager"], m["operation"]) for m in found["metadata"]["managedFields"]}
        if obj["kind"] == "Node":  # the kubelet registered it; Rackplane applied its labels
            assert managers == {("kubelet", "Update"), ("rackplane", "Apply")}, obj["metadata"]["name"]
            assert obj["metadata"]["labels"].items() <= found["metadata"]["labels"].items()
        else:
            assert managers == {("rackplane", "Apply")}, obj["metadata"]
    assert kube.get("Topology", "nvlink") is not None
    assert kube_proxy.requests
    assert all(r.authorization == f"Bearer {kube_testbed.token}" for r in kube_proxy.requests)

    token = kube_testbed.token
    for url in (
        reverse("integrations:target-list"),
        reverse("integrations:target-edit", args=[k8s.pk]),
        reverse("integrations:push-detail", args=[push.pk]),
        reverse("integrations:push-list"),
    ):
        page = admin_client_logged_in.get(url).content.decode()
        assert token not in page, url
    assert token not in push.log + push.error
    assert k8s.masked_settings()["token"] == "••••••••"


@pytest.mark.integration
def test_a_second_identical_kubernetes_push_writes_nothing(
    k8s, kube, kube_proxy, django_capture_on_commit_callbacks
):
    change_state("Vision")
    [first] = push_now(django_capture_on_commit_callbacks, targets=[k8s])
    assert first.status == PushStatus.SUCCEEDED, first.error
    before = kube.resource_versions()
    writes = len(kube_proxy.writes)

    # Forced: the adapter compares every object with the live one instead of trusting the payload's hash.
    [second] = push_now(django_capture_on_commit_callbacks, targets=[k8s], force=True)

    assert second.status == PushStatus.SUCCEEDED, second.error
    assert "0 created, 0 updated, 0 deleted" in second.log
    assert kube_proxy.writes[writes:] == []
    assert kube.resource_versions() == before


@pytest.mark.integration
def test_a_department_removed_in_the_portal_is_pruned_from_kubernetes(
    k8s, kube, kube_proxy, render_dir, platform_admin, django_capture_on_commit_callbacks
):
    from tests.factories import token_client

    change_state("Vision")
    change_state("Robotics")
    [first] = push_now(django_capture_on_commit_callbacks, targets=[k8s])
    assert first.status == PushStatus.SUCCEEDED, first.error
    assert kube.names("ClusterQueue") == ["robotics", "vision"]
    assert kube.names("LocalQueue") == ["robotics/default", "vision/default"]
    robotics = {k: v for k, v in kube.resource_versions().items() if "robotics" in k}

    with django_capture_on_commit_callbacks(execute=True):
        response = token_client(platform_admin).delete("/api/v1/departments/vision/")
    assert response.status_code == 204
    push = ConfigPush.objects.filter(target=k8s).latest("pk")
    assert push.pk != first.pk and "department vision" in push.reason
    assert push.status == PushStatus.SUCCEEDED, push.error

    namespace = kube.get("Namespace", "vision")  # Terminating: no namespace controller runs here
    assert namespace["metadata"]["deletionTimestamp"] and namespace["status"]["phase"] == "Terminating"
    assert kube.get("ClusterQueue", "vision") is None
    assert kube.get("LocalQueue", "default", "vision") is None
    assert kube.names("ClusterQueue") == ["robotics"]
    assert {k: v for k, v in kube.resource_versions().items() if "robotics" in k} == robotics

    # The next push leaves what is being deleted to its deletion and changes nothing else.
    writes = len(kube_proxy.writes)
    [again] = push_now(django_capture_on_commit_callbacks, targets=[k8s], force=True)
    assert again.status == PushStatus.SUCCEEDED, again.error
    assert kube_proxy.writes[writes:] == []


# --- settings -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "raw", "error"),
    [
        ("slurm", {}, "config_dir"),
        ("slurm", {"config_dir": "etc/slurm"}, "absolute"),
        ("slurm", {"config_dir": "/etc/slurm", "topology_format": "json"}, "conf or yaml"),
        ("kubernetes", {"api_url": "https://api:6443"}, "CA file"),
        ("kubernetes", {"api_url": "https://api:6443", "ca_file": "/ca.pem", "insecure": True}, "not both"),
        ("fabric", {"kind": "nmx"}, "base_url"),
        ("directory", {"colour": "blue"}, "not a setting"),
    ],
)
def test_settings_are_validated_per_kind(kind, raw, error):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as caught:
        clean_settings(kind, raw)
    assert error in str(caught.value.message_dict)


def test_settings_defaults_are_filled():
    assert clean_settings("directory", {}) == {"path": "", "keep": 5}
    assert clean_settings("fabric", {})["kind"] == "simulated"
    values = clean_settings("kubernetes", {"api_url": "http://127.0.0.1:8001/", "token": " t "})
    assert values["api_url"] == "http://127.0.0.1:8001" and values["token"] == "t"


# --- pages --------------------------------------------------------------------------------------------


def page_urls(push: ConfigPush) -> list[str]:
    return [
        reverse("integrations:target-list"),
        reverse("integrations:target-create"),
        reverse("integrations:target-edit", args=[push.target_id]),
        reverse("integrations:push-list"),
        reverse("integrations:push-detail", args=[push.pk]),
    ]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_pages_are_for_platform_admins_only(
    client, local, lead_a, outsider, platform_admin, django_capture_on_commit_callbacks
):
    [push] = push_now(django_capture_on_commit_callbacks)
    for url in page_urls(push):
        assert client.get(url).status_code == 302, url  # anonymous: to the login page
    for someone in (lead_a, outsider):
        client.force_login(someone)
        for url in page_urls(push):
            assert client.get(url).status_code == 403, (someone, url)
        assert client.post(reverse("integrations:push-retry", args=[push.pk])).status_code == 403
        assert client.post(reverse("integrations:push-list")).status_code == 403
        assert "Config pushes" not in client.get(reverse("home")).content.decode()
    assert ConfigPush.objects.count() == 1
    client.force_login(platform_admin)
    for url in page_urls(push):
        assert client.get(url).status_code == 200, url
    assert "Config pushes" in client.get(reverse("home")).content.decode()
    assert list(ConfigPush.objects.visible_to(lead_a)) == []
    assert list(ConfigTarget.objects.visible_to(outsider)) == []
    assert list(ConfigPush.objects.visible_to(platform_admin)) == [push]


def test_the_progress_page_polls_until_the_push_is_done(
    local, admin_client_logged_in, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        [push] = pushes.queue_pushes(reason="watch me")
    url = reverse("integrations:push-detail", args=[push.pk])

    page = admin_client_logged_in.get(url)
    assert page.status_code == 200
    assert 'hx-trigger="every 2s"' in page.content.decode()
    poll = admin_client_logged_in.get(url, HTTP_HX_REQUEST="true")
    assert poll.status_code == 200
    assert 'hx-trigger="every 2s"' in poll.content.decode()
    assert "<html" not in poll.content.decode()

    callbacks[0]()
    done = admin_client_logged_in.get(url, HTTP_HX_REQUEST="true")
    assert done.status_code == 286  # htmx: swap this in, stop polling
    assert "hx-trigger" not in done.content.decode()
    assert "Succeeded" in done.content.decode()


def test_a_failed_push_says_what_to_do_and_offers_a_retry(
    demo_inventory, slurm_dir, tmp_path, admin_client_logged_in, django_capture_on_commit_callbacks
):
    target = slurm_target(slurm_dir, fake_scontrol(tmp_path, up=True, reconfigure="parse error"))
    [push] = push_now(django_capture_on_commit_callbacks, targets=[target])
    page = admin_client_logged_in.get(reverse("integrations:push-detail", args=[push.pk])).content.decode()
    assert "What to do next:" in page
    assert reverse("integrations:push-retry", args=[push.pk]) in page
    listing = admin_client_logged_in.get(reverse("integrations:push-list")).content.decode()
    assert "What to do next: fix the configuration" in listing


def test_push_buttons_queue_pushes(local, admin_client_logged_in, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client_logged_in.post(reverse("integrations:push-list"), {"target": local.pk})
    push = ConfigPush.objects.get()
    assert response["Location"] == reverse("integrations:push-detail", args=[push.pk])
    assert push.reason == "pushed from the portal"
    assert push.status == PushStatus.SUCCEEDED


def test_target_form_creates_edits_and_keeps_the_token(admin_client_logged_in, db):
    create = reverse("integrations:target-create")
    fields = {
        "name": "prod-k8s",
        "kind": "kubernetes",
        "enabled": "on",
        "api_url": "https://api.example:6443",
    }

    missing = admin_client_logged_in.post(create, fields)
    assert missing.status_code == 400
    assert "needs its CA file" in missing.content.decode()

    response = admin_client_logged_in.post(
        create, {**fields, "ca_file": "/etc/k8s/ca.pem", "k8s_token": TOKEN}
    )
    assert response.status_code == 302
    target = ConfigTarget.objects.get(name="prod-k8s")
    assert target.settings["token"] == TOKEN
    edit = reverse("integrations:target-edit", args=[target.pk])
    page = admin_client_logged_in.get(edit).content.decode()
    assert TOKEN not in page and "A token is stored" in page

    # Saving without typing a token keeps it; ticking "clear" removes it.
    admin_client_logged_in.post(edit, {**fields, "ca_file": "/etc/k8s/ca.pem", "dry_run": "on"})
    target.refresh_from_db()
    assert target.settings["token"] == TOKEN and target.settings["dry_run"] is True
    admin_client_logged_in.post(edit, {**fields, "ca_file": "/etc/k8s/ca.pem", "clear_token": "on"})
    target.refresh_from_db()
    assert target.settings["token"] == ""

    # The kind select swaps in that kind's settings.
    partial = admin_client_logged_in.get(create, {"kind": "slurm"}, HTTP_HX_REQUEST="true").content.decode()
    assert 'name="config_dir"' in partial and 'name="api_url"' not in partial and "<html" not in partial

    taken = admin_client_logged_in.post(create, {**fields, "name": "prod-k8s", "ca_file": "/ca.pem"})
    assert "already exists" in taken.content.decode()


def test_try_again_now_sends_a_waiting_retry_at_once(
    local, admin_client_logged_in, django_capture_on_commit_callbacks
):
    push = ConfigPush.objects.create(
        target=local,
        payload={"files": {"a.txt": "a\n"}},
        payload_hash="x",
        attempts=1,
        error="the target did not answer\n(retrying: attempt 2 of 5 is due in 2s)",
        next_attempt_at=timezone.now() + timedelta(minutes=5),
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client_logged_in.post(reverse("integrations:push-retry", args=[push.pk]))

    assert response["Location"] == reverse("integrations:push-detail", args=[push.pk])
    push.refresh_from_db()
    assert push.status == PushStatus.SUCCEEDED
    assert push.attempts == 2
    assert "retry now requested by admin" in push.log


def test_render_current_is_what_a_directory_target_would_hold(local):
    from integrations import state as configstate

    assert configstate.render_current() == pushes.Rendered().payload_for(local)["files"]


def test_slurm_target_form_sets_the_job_settings_and_keeps_the_rest_token(admin_client_logged_in, db):
    create = reverse("integrations:target-create")
    fields = {
        "name": "prod-slurm",
        "kind": "slurm",
        "enabled": "on",
        "config_dir": "/etc/slurm",
        "rest_url": "http://slurm-ctl:6820",
        "rest_user": "rackplane",
        "accounting": "on",
    }
    assert admin_client_logged_in.post(create, {**fields, "rest_token": TOKEN}).status_code == 302
    target = ConfigTarget.objects.get(name="prod-slurm")
    assert target.settings["rest_url"] == "http://slurm-ctl:6820" and target.settings["rest_token"] == TOKEN
    assert target.settings["accounting"] is True and target.settings["imex"] is False
    edit = reverse("integrations:target-edit", args=[target.pk])
    page = admin_client_logged_in.get(edit).content.decode()
    assert TOKEN not in page and "A token is stored" in page and 'value="http://slurm-ctl:6820"' in page
    # Editing another setting keeps the job settings and the token.
    assert admin_client_logged_in.post(edit, {**fields, "imex": "on"}).status_code == 302
    target.refresh_from_db()
    assert target.settings["rest_token"] == TOKEN and target.settings["imex"] is True
    assert target.settings["rest_user"] == "rackplane"
