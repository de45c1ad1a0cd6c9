"""manage.py import_fabric_labels TARGET: import the fabric from the Topograph labels on a Kubernetes
configuration target's nodes (issue 33)."""

from django.core.management.base import BaseCommand, CommandError

from core.audit import audit_context
from core.errors import ExternalError
from core.models import AuditSource
from integrations.kubernetes.fabric_labels import is_kubernetes, read_fabric
from integrations.models import ConfigTarget
from inventory import fabric_import
from inventory.discovery.fabric.parsed import FabricInputError


class Command(BaseCommand):
    help = (
        "Read the nodes of a Kubernetes configuration target, take the fabric NVIDIA Topograph labelled them "
        "with (fabric.topograph.run/tier-N, or v0.x's network.topology.nvidia.com/leaf and spine), and "
        "import it as the Topograph source: all or nothing, as `import_fabric topograph` does with "
        "`kubectl get nodes -o json`."
    )

    def add_arguments(self, parser):
        parser.add_argument("target", help="the Kubernetes configuration target's name")
        parser.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
        parser.add_argument("--use", action="store_true", help="put this import in use even if another is")

    def handle(self, *args, target, dry_run, use, **options):
        chosen = ConfigTarget.objects.filter(name=target).first()
        if chosen is None or not is_kubernetes(chosen):
            raise CommandError(f"no Kubernetes configuration target named {target!r}")
        try:
            parsed = read_fabric(chosen)
            if dry_run:
                result = fabric_import.plan(parsed, use=use)
            else:
                with audit_context(AuditSource.COMMAND):
                    result = fabric_import.apply(parsed, label=f"Kubernetes target {chosen.name}", use=use)
        except FabricInputError as error:
            raise CommandError(f"{chosen.name}'s nodes: {error}; nothing was written") from error
        except ExternalError as error:
            raise CommandError(f"{chosen.name}: {error}; nothing was written") from error
        for line in fabric_import.summary(result, dry_run):
            self.stdout.write(line)
