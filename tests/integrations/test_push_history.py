"""Pushes you can trust (integrations.push_history and its pages): each push's diff against the previous
push to its target, pushing an earlier version again (rollback, audited, through the push pipeline), the
bound on stored payloads, and "test connection" on the real directory target."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core.models import AuditEvent
from integrations import push_history, pushes
from integrations.contents import payload_of
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from inventory.models import Rack
from tenancy.models import Department
from tenancy.services import save_department

pytestmark = pytest.mark.django_db


def push_now(django_capture_on_commit_callbacks, target, reason="test") -> ConfigPush:
    with django_capture_on_commit_callbacks(execute=True):
        [push] = pushes.queue_pushes(reason=reason, targets=[target])
    push.refresh_from_db()
    return push


@pytest.fixture
def two_pushes(local_target, demo_inventory, django_capture_on_commit_callbacks):
    """Two succeeded pushes to the local directory target: the second after a new department appeared."""
    first = push_now(django_capture_on_commit_callbacks, local_target, "first")
    save_department(Department(name="Vision", slug="vision", guaranteed_gpus=4))
    second = push_now(django_capture_on_commit_callbacks, local_target, "second")
    assert (first.status, second.status) == (PushStatus.SUCCEEDED, PushStatus.SUCCEEDED)
    assert first.payload_hash != second.payload_hash
    return first, second


def test_payload_items_name_files_objects_racks_and_qos():
    items = push_history.payload_items(
        {
            "files": {"topology.conf": "BlockName=b1\n"},
            "objects": [{"kind": "ClusterQueue", "metadata": {"name": "vision"}, "spec": {"x": 1}}],
            "racks": [{"rack": "gb-r01", "partitions": []}],
            "qos": [{"name": "vision", "gpu_limit": 8}],
        }
    )
    assert set(items) == {"topology.conf", "ClusterQueue vision", "rack gb-r01", "Slurm QOS"}
    assert "spec:\n  x: 1" in items["ClusterQueue vision"]


def test_diff_items_marks_added_removed_changed_unchanged():
    items = {
        i.name: i
        for i in push_history.diff_items(
            {"a": "1\n2\n", "b": "same\n", "gone": "x\n"}, {"a": "1\n3\n", "b": "same\n", "new": "y\n"}
        )
    }
    assert {n: i.state for n, i in items.items()} == {
        "a": "changed",
        "b": "unchanged",
        "gone": "removed",
        "new": "added",
    }
    assert "-2" in items["a"].lines and "+3" in items["a"].lines
    assert (items["a"].added, items["a"].removed) == (1, 1)
    assert items["b"].lines == []


# Kueue objects, one YAML document each: the last one (a department's flavour) is removed with its separator.
KUEUE = "kind: ClusterQueue\nname: a\n---\nkind: Topology\nname: t\n---\nkind: ResourceFlavor\nname: vision\n"


def test_a_removed_yaml_document_counts_its_separator_as_a_removed_line():
    """A removed `---` reads `----` in the diff: a removed line like the others, not a file header (it was
    styled as one and left out of the count)."""
    (item,) = push_history.diff_items(
        {"kueue.yaml": KUEUE}, {"kueue.yaml": KUEUE.replace("---\nkind: ResourceFlavor\nname: vision\n", "")}
    )
    assert (item.added, item.removed) == (0, 3)
    assert [line for css, line in item.styled if css == "diff-del"] == [
        "----",
        "-kind: ResourceFlavor",
        "-name: vision",
    ]
    assert [line for css, line in item.styled if css == "diff-file"] == [
        "--- previous/kueue.yaml",
        "+++ this push/kueue.yaml",
    ]


def test_second_push_diff_shows_the_new_department_against_the_first(two_pushes):
    first, second = two_pushes
    diff = push_history.push_diff(second)
    assert diff.previous.pk == first.pk
    changed = {item.name for item in diff.changed}
    assert changed, "a new department changes what is rendered"
    text = "\n".join(line for item in diff.changed for line in item.lines)
    assert "vision" in text.lower()
    assert diff.unchanged, "files that stayed the same are listed as unchanged"
    first_diff = push_history.push_diff(first)
    assert first_diff.previous is None and all(i.state == "added" for i in first_diff.items)


def test_push_page_shows_the_diff_escaped_and_unchanged_collapsed(
    two_pushes, client_as, platform_admin, django_capture_on_commit_callbacks
):
    first, second = two_pushes
    # A file whose text looks like markup must be shown as text, never as HTML.
    second.payload = {
        "files": {**payload_of(second.payload)["files"], "evil.conf": "<script>alert(1)</script>\n"}
    }
    second.save(update_fields=["payload"])
    page = client_as(platform_admin).get(reverse("integrations:push-detail", args=[second.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert f'against <a href="/integrations/pushes/{first.pk}/">push #{first.pk}</a>' in html or (
        f"push #{first.pk}</a>" in html
    )
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert 'data-state="added"' in html and 'data-item="evil.conf"' in html
    assert '<details class="diff-file-block unchanged-items" data-state="unchanged">' in html  # collapsed


def test_push_again_queues_the_old_payload_through_the_pipeline_and_audits(
    two_pushes, client_as, platform_admin, render_dir, django_capture_on_commit_callbacks
):
    first, second = two_pushes
    client = client_as(platform_admin)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("integrations:push-again", args=[first.pk]))
    again = ConfigPush.objects.order_by("-pk").first()
    assert again.pk > second.pk
    assert response.status_code == 302 and response.url == reverse(
        "integrations:push-detail", args=[again.pk]
    )
    assert again.payload == first.payload and again.payload_hash == first.payload_hash
    assert again.status == PushStatus.SUCCEEDED and again.requested_by == platform_admin
    assert f"push #{first.pk}" in again.reason
    # What the target runs now is the first push's version, file for file.
    live = (render_dir / "current").resolve()
    for name, text in payload_of(first.payload)["files"].items():
        assert (live / name).read_text() == text
    event = AuditEvent.objects.get(object_type="integrations.configpush", object_id=str(again.pk))
    assert event.actor == platform_admin and event.after["rollback_of"] == first.pk
    # And its diff against the second push shows the department going away.
    diff = push_history.push_diff(again)
    assert diff.previous.pk == second.pk and diff.changed


def test_push_again_is_post_only_and_admin_only(two_pushes, client_as, platform_admin, lead_a):
    first, _ = two_pushes
    url = reverse("integrations:push-again", args=[first.pk])
    count = ConfigPush.objects.count()
    assert client_as(platform_admin).get(url).status_code == 405
    assert client_as(lead_a).post(url).status_code in (403, 404)
    assert ConfigPush.objects.count() == count


def test_push_again_refused_while_a_push_runs(two_pushes, client_as, platform_admin):
    first, second = two_pushes
    ConfigPush.objects.filter(pk=second.pk).update(status=PushStatus.RUNNING)
    count = ConfigPush.objects.count()
    response = client_as(platform_admin).post(
        reverse("integrations:push-again", args=[first.pk]), follow=True
    )
    assert ConfigPush.objects.count() == count
    assert "A push is running on local: wait for it to finish" in response.content.decode()


def test_old_payloads_are_let_go_beyond_the_bound(two_pushes):
    first, second = two_pushes
    assert pushes.prune_payloads(first.target_id, keep=1) == 1
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.payload == {} and first.payload_hash and second.payload
    assert "was let go" in push_history.push_diff(first).unavailable
    assert "was let go" in push_history.push_diff(second).unavailable
    assert "let go" in push_history.can_push_again(first)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_finishing_a_push_prunes_payloads(local_target, demo_inventory, django_capture_on_commit_callbacks):
    ids = []
    for n in range(3):
        save_department(Department(name=f"D{n}", slug=f"d{n}", guaranteed_gpus=1))
        ids.append(push_now(django_capture_on_commit_callbacks, local_target, f"p{n}").pk)
    assert all(ConfigPush.objects.get(pk=pk).payload for pk in ids)  # the bound (20) is not reached


def test_test_connection_directory_ok_in_words(local_target, client_as, platform_admin, render_dir):
    response = client_as(platform_admin).post(
        reverse("integrations:target-test", args=[local_target.pk]), HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert response.status_code == 200 and 'data-ok="true"' in html
    assert "Connection works." in html and "local answers:" in html
    assert not render_dir.exists() or not any(render_dir.iterdir()), "testing writes nothing"


def test_test_connection_directory_failure_in_words(db, tmp_path, client_as, platform_admin):
    blocker = tmp_path / "out"
    blocker.write_text("a file where the directory should be")
    target = ConfigTarget.objects.create(
        name="ro", kind="directory", settings={"path": str(blocker), "keep": 5}
    )
    response = client_as(platform_admin).post(reverse("integrations:target-test", args=[target.pk]))
    assert response.status_code == 302
    page = client_as(platform_admin).get(response.url).content.decode()
    assert "Testing ro failed:" in page and "exists but is not a directory" in page
    assert blocker.read_text() == "a file where the directory should be"


def test_test_connection_is_post_only_and_admin_only(local_target, client_as, platform_admin, lead_a):
    url = reverse("integrations:target-test", args=[local_target.pk])
    assert client_as(platform_admin).get(url).status_code == 405
    assert client_as(lead_a).post(url).status_code in (403, 404)


def test_a_failed_push_notifies_its_subscribers(
    demo_inventory, tmp_path, platform_admin, django_capture_on_commit_callbacks
):
    from core.models import InboxItem, NotificationChannel, NotificationSubscription

    blocker = tmp_path / "out"
    blocker.write_text("not a directory")
    target = ConfigTarget.objects.create(
        name="ro", kind="directory", settings={"path": str(blocker), "keep": 5}
    )
    NotificationSubscription.objects.create(
        name="pushes", channel=NotificationChannel.PORTAL, events=["push_failed"], owner=platform_admin
    )
    push = push_now(django_capture_on_commit_callbacks, target)
    assert push.status == PushStatus.FAILED
    item = InboxItem.objects.get(user=platform_admin)
    assert item.subject.startswith(f"Push #{push.pk} to ro failed:")
    assert item.link == reverse("integrations:push-detail", args=[push.pk])


def test_the_simulated_fabric_answers_test_connection_with_what_it_holds(
    db, client_as, platform_admin, demo_inventory, monkeypatch
):
    from integrations.fabric import adapter
    from integrations.registry import clean_settings

    monkeypatch.setattr(adapter, "_SIMULATED", {})  # a fresh in-memory fabric, as in a new process

    target = ConfigTarget.objects.create(
        name="fabric", kind="fabric", settings=clean_settings("fabric", {"kind": "simulated"})
    )
    response = client_as(platform_admin).post(
        reverse("integrations:target-test", args=[target.pk]), HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert response.status_code == 200 and "Connection works." in html and "note-info" in html
    racks = Rack.objects.exclude(cluster_uuid=None).count()
    assert f"simulated fabric in this process: {racks:,} NVLink domains" in html
    target.refresh_from_db()
    assert target.facts["fabric_manager"] == "simulated"  # the versions page shows what it is
