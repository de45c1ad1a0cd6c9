"""Seed the stack tests' database: `python -m tests.stack.seed` in the stack's environment (DATABASE_URL).

Migrates, seeds STACK_RACKS racks (4) through inventory.demo, two departments with a lead each, a platform
admin, API tokens for the three, and one enabled directory target writing under STACK_TARGET_DIR. Prints one
JSON line: the tokens, department slugs, rack names and the target's id.
"""

from __future__ import annotations

import json
import os

import django

ADMIN_PASSWORD = "stack-admin-password-7f3k"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    from core.access import Role
    from integrations.models import ConfigTarget
    from inventory.demo import seed_datacenter
    from inventory.models import Rack
    from tenancy.models import Department, Membership
    from tenancy.services import save_department

    call_command("migrate", verbosity=0)
    seed_datacenter(racks=int(os.environ.get("STACK_RACKS", "4")))
    # The seeded trays "reported" once, at seed time, and no node agent runs here: without this they turn
    # silent (stale, unschedulable) five minutes into the session.
    from inventory.models import HealthSettings

    health = HealthSettings.load()
    health.node_silent_after_s = 86400
    health.save()
    User = get_user_model()
    admin = User.objects.create_user(
        "stack-admin", "admin@example.com", ADMIN_PASSWORD, is_staff=True, is_superuser=True
    )
    tokens = {"admin": Token.objects.create(user=admin).key}
    departments = []
    for slug in ("alpha", "beta"):
        department = save_department(Department(name=slug.title(), slug=slug, guaranteed_gpus=72))
        lead = User.objects.create_user(f"lead-{slug}", f"lead-{slug}@example.com", None)
        Membership.objects.create(user=lead, department=department, role=Role.LEAD)
        tokens[slug] = Token.objects.create(user=lead).key
        departments.append(slug)
    target = ConfigTarget.objects.create(
        name="stack-directory",
        kind="directory",
        enabled=True,
        settings={"path": os.environ["STACK_TARGET_DIR"], "keep": 100},
    )
    print(
        json.dumps(
            {
                "tokens": tokens,
                "departments": departments,
                "racks": list(Rack.objects.order_by("name").values_list("name", flat=True)),
                "target": target.pk,
            }
        ),
        flush=True,
    )


def big_push(files: int) -> None:
    """A queued push of `files` files to the seeded directory target, its task sent now: long enough to be
    caught in the middle. Prints its id."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from core.enqueue import send_now
    from core.task_names import PUSH_CONFIG
    from integrations.models import ConfigPush, ConfigTarget, PushStatus
    from integrations.pushes import payload_hash

    target = ConfigTarget.objects.get(name="stack-directory")
    payload = {
        "files": {f"nodes/n{n:05d}.conf": f"NodeName=n{n:05d} Gres=gpu:4\n" * 20 for n in range(files)}
    }
    push = ConfigPush.objects.create(
        target=target,
        payload=payload,
        payload_hash=payload_hash(payload),
        status=PushStatus.QUEUED,
        reason="stack test: a large push",
    )
    print(push.pk, flush=True)
    if not send_now(PUSH_CONFIG, push.pk):
        raise SystemExit("the push task was not sent")


def queue_push() -> None:
    """A push of the seeded directory target through queue_pushes (forced): prints its id."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from integrations.models import ConfigTarget
    from integrations.pushes import queue_pushes

    target = ConfigTarget.objects.get(name="stack-directory")
    pushes = queue_pushes(reason="stack test", targets=[target], force=True)
    print(pushes[0].pk, flush=True)


def cancel_all() -> None:
    """Cancel every job still pending or holding GPUs (scheduling.services.actions.cancel_job: GPUs freed at
    once), so that the next test starts on an empty cluster. Prints how many."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from scheduling.choices import ACTIVE_STATES
    from scheduling.models import Job
    from scheduling.services.actions import cancel_job

    jobs = list(Job.objects.filter(state__in=ACTIVE_STATES))
    for job in jobs:
        cancel_job(job)
    print(len(jobs), flush=True)


if __name__ == "__main__":
    import sys

    command = sys.argv[1:] or ["seed"]
    if command[0] == "push":
        big_push(int(command[1]))
    elif command[0] == "queue-push":
        queue_push()
    elif command[0] == "cancel-all":
        cancel_all()
    else:
        main()
