from django.core.management.base import BaseCommand, CommandError

from integrations import pushes
from integrations.models import ConfigPush, ConfigTarget
from integrations.tasks import push_config


class Command(BaseCommand):
    help = (
        "Push the current configuration to every enabled target (or one, --target): a ConfigPush row per "
        "target, then its task. With eager Celery (no broker) the pushes run here and each result is "
        "printed. --dry-run prints what would change on each target and changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--target", help="only this target (by name)")
        parser.add_argument("--dry-run", action="store_true", help="print the diff per target, push nothing")
        parser.add_argument("--reason", default="manage.py push_configs", help="recorded on each push")
        parser.add_argument(
            "--force", action="store_true", help="push even when the target already has this configuration"
        )

    def handle(self, *args, target, dry_run, reason, force, **options):
        targets = None
        if target:
            chosen = ConfigTarget.objects.filter(name=target).first()
            if chosen is None:
                names = ", ".join(ConfigTarget.objects.values_list("name", flat=True)) or "none"
                raise CommandError(f"no target named {target!r} (targets: {names})")
            if not chosen.enabled:
                raise CommandError(f"target {target} is disabled: enable it first")
            targets = [chosen]
        elif not ConfigTarget.objects.filter(enabled=True).exists():
            raise CommandError("no enabled targets: create one on the Config pushes page or in the admin")

        if dry_run:
            for name, lines in pushes.dry_run(targets).items():
                self.stdout.write(self.style.MIGRATE_HEADING(f"== {name}"))
                for line in lines:
                    self.stdout.write(line)
            self.stdout.write("Dry run: nothing was pushed.")
            return

        # With eager Celery the pushes run when queue_pushes commits; a push left queued for a retry is
        # superseded by the one queued now, which is how this command retries it.
        created = pushes.queue_pushes(reason=reason, targets=targets, force=force)
        if push_config.app.conf.task_always_eager:
            # Called inside an outer transaction (another command, a test) the commit has not happened yet:
            # run what is still waiting here. The message sent on commit then finds it claimed: a no-op.
            for push in created:
                if ConfigPush.objects.filter(pk=push.pk, status="queued", attempts=0).exists():
                    push_config.delay(push.pk)
        if not created:
            self.stdout.write(
                "No push queued: each chosen target has a push running (it takes the change next)."
            )
        failed = False
        for push in created:
            push = ConfigPush.objects.select_related("target").get(pk=push.pk)
            line = f"{push.target.name}: push #{push.pk} {push.get_status_display().lower()}"
            last = push.log.strip().splitlines()[-1].split(" ", 2)[-1] if push.log.strip() else ""
            if push.status == "failed":
                failed = True
                self.stdout.write(self.style.ERROR(f"{line}\n{push.error}"))
            elif push.status == "queued" and push.error:
                self.stdout.write(self.style.WARNING(f"{line} (retrying)\n{push.error}"))
            elif push.status == "queued":
                self.stdout.write(f"{line}: a worker runs it")
            else:
                self.stdout.write(self.style.SUCCESS(f"{line}: {last.removeprefix('succeeded: ')}"))
        if failed:
            raise CommandError("some pushes failed (see above)")
