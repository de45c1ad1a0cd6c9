"""After a rollback the target runs an older version (integrations.push_history.rolled_back, its pages): the
targets page and the rollback's own page say so with a "Push the current configuration" button that queues a
normal push; once that push succeeds nothing is said any more. A push that succeeded without sending anything
(unchanged) says so instead of "Attempts 0"."""

from __future__ import annotations

import pytest
from django.urls import reverse

from integrations import push_history, pushes
from integrations.contents import payload_of
from integrations.models import ConfigPush, PushStatus
from tenancy.models import Department
from tenancy.services import save_department

pytestmark = pytest.mark.django_db

TARGETS = reverse("integrations:target-list")


def push_now(capture, target, reason="test") -> ConfigPush:
    with capture(execute=True):
        [push] = pushes.queue_pushes(reason=reason, targets=[target])
    push.refresh_from_db()
    return push


@pytest.fixture
def rolled_back(local_target, demo_inventory, django_capture_on_commit_callbacks, client_as, platform_admin):
    """Push #first, a department added and pushed (#second), then the first version pushed again."""
    first = push_now(django_capture_on_commit_callbacks, local_target, "first")
    save_department(Department(name="Vision", slug="vision", guaranteed_gpus=4))
    second = push_now(django_capture_on_commit_callbacks, local_target, "second")
    with django_capture_on_commit_callbacks(execute=True):
        again = push_history.push_again(first, platform_admin)
    again.refresh_from_db()
    assert again.status == PushStatus.SUCCEEDED and again.payload_hash == first.payload_hash
    return first, second, again


def test_rolled_back_names_the_rollback_its_version_and_the_current_push(rolled_back, local_target):
    first, second, again = rolled_back
    state = push_history.rolled_back(local_target)
    assert state is not None
    assert (state.push.pk, state.version_of, state.current.pk, state.pending) == (
        again.pk,
        first.pk,
        second.pk,
        None,
    )
    assert state.sentence == (
        f"Runs an older version: push #{again.pk} rolled back to the version of push #{first.pk}, not the "
        f"current configuration (push #{second.pk})."
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_targets_page_and_the_rollbacks_page_show_it_with_the_button(rolled_back, client_as, platform_admin):
    first, second, again = rolled_back
    client = client_as(platform_admin)
    page = client.get(TARGETS).content.decode()
    assert "rollback-badge" in page and ">older version</span>" in page
    assert f"a rollback to the version of push #{first.pk}, not the current configuration" in page
    assert f'name="after_rollback" value="{again.pk}"' in page
    assert "Push the current configuration</button>" in page
    detail = client.get(reverse("integrations:push-detail", args=[again.pk])).content.decode()
    assert "the target now runs an older version than the current configuration" in detail
    assert f'name="after_rollback" value="{again.pk}"' in detail
    # The pages of the other pushes say nothing of it.
    for push in (first, second):
        other = client.get(reverse("integrations:push-detail", args=[push.pk])).content.decode()
        assert "rollback-badge" not in other


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_push_the_current_configuration_queues_a_normal_push_and_the_badge_goes(
    rolled_back, local_target, client_as, platform_admin, render_dir, django_capture_on_commit_callbacks
):
    _first, second, again = rolled_back
    client = client_as(platform_admin)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("integrations:push-list"), {"target": local_target.pk, "after_rollback": again.pk}
        )
    current = ConfigPush.objects.order_by("-pk").first()
    assert current.pk > again.pk
    assert response.status_code == 302 and response.url == reverse(
        "integrations:push-detail", args=[current.pk]
    )
    assert current.reason == f"current configuration pushed again after the rollback (push #{again.pk})"
    assert current.status == PushStatus.SUCCEEDED and current.attempts == 1  # sent, not "unchanged"
    assert current.payload_hash == second.payload_hash
    live = (render_dir / "current").resolve()
    for name, text in payload_of(second.payload)["files"].items():
        assert (live / name).read_text() == text
    assert push_history.rolled_back(local_target) is None
    assert "rollback-badge" not in client.get(TARGETS).content.decode()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_push_queued_after_the_rollback_is_named_instead_of_the_button(
    rolled_back, local_target, client_as, platform_admin
):
    # Queued, its task not run (no commit callbacks executed).
    [queued] = pushes.queue_pushes(reason="later", targets=[local_target])
    assert queued.status == PushStatus.QUEUED
    state = push_history.rolled_back(local_target)
    assert state is not None and state.pending.pk == queued.pk
    page = client_as(platform_admin).get(TARGETS).content.decode()
    assert f"Push #{queued.pk}</a> brings it back." in page
    assert 'name="after_rollback"' not in page


def test_pushing_the_current_version_again_is_no_rollback_to_an_older_one(
    local_target, demo_inventory, django_capture_on_commit_callbacks, platform_admin
):
    first = push_now(django_capture_on_commit_callbacks, local_target, "first")
    with django_capture_on_commit_callbacks(execute=True):
        push_history.push_again(first, platform_admin)  # the same version: a repair, not a rollback
    assert push_history.rolled_back(local_target) is None


def test_an_unchanged_push_says_nothing_was_sent_not_attempts_0(
    local_target, demo_inventory, django_capture_on_commit_callbacks, client_as, platform_admin
):
    push_now(django_capture_on_commit_callbacks, local_target, "first")
    unchanged = push_now(django_capture_on_commit_callbacks, local_target, "nothing new")
    assert (unchanged.status, unchanged.attempts) == (PushStatus.SUCCEEDED, 0)
    client = client_as(platform_admin)
    detail = client.get(reverse("integrations:push-detail", args=[unchanged.pk])).content.decode()
    assert "<dt>Attempts</dt><dd>none needed: nothing was sent</dd>" in detail
    assert "Succeeded without sending anything" in detail
    listing = client.get(reverse("integrations:push-list")).content.decode()
    assert ">none needed</span>" in listing


def test_an_older_push_says_the_target_has_since_received_a_newer_one(rolled_back, client_as, platform_admin):
    first, second, again = rolled_back
    client = client_as(platform_admin)
    for push in (first, second):
        page = client.get(reverse("integrations:push-detail", args=[push.pk])).content.decode()
        assert "The target has since received <a href=" in page and f">push #{again.pk}</a>" in page
        assert "Succeeded: the target runs this configuration." not in page
