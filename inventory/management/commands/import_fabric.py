"""manage.py import_fabric SOURCE FILE: import the compute fabric above the rack (issue 33)."""

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from core.audit import audit_context
from core.models import AuditSource
from inventory import fabric_import
from inventory.discovery.fabric.parsed import MAX_BYTES, FabricInputError
from inventory.discovery.fabric.read import SOURCES, read


class Command(BaseCommand):
    help = (
        "Import the compute fabric (scalable units, spine groups, each rack's place, each GPU's NIC rail) "
        "from ibnetdiscover's output, `kubectl get nodes -o json` with Topograph's labels, or a site file "
        "(YAML or CSV). All or nothing: bad input is refused naming the line, and nothing is written. The "
        "first import is put in use; an import of another source is kept beside it and its disagreements "
        "shown on the fabric page, unless --use."
    )

    def add_arguments(self, parser):
        parser.add_argument("source", choices=SOURCES, help="what FILE is")
        parser.add_argument("file", help="the file, or - for standard input")
        parser.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
        parser.add_argument("--use", action="store_true", help="put this import in use even if another is")

    def handle(self, *args, source, file, dry_run, use, **options):
        try:
            if file == "-":
                data = sys.stdin.buffer.read(MAX_BYTES + 1)
            else:
                with Path(file).open("rb") as handle:
                    data = handle.read(MAX_BYTES + 1)
        except OSError as error:
            raise CommandError(f"cannot read {file}: {error.strerror}") from error
        name = "stdin" if file == "-" else Path(file).name
        try:
            parsed = read(source, data, name)
            if dry_run:
                result = fabric_import.plan(parsed, use=use)
            else:
                with audit_context(AuditSource.COMMAND):
                    result = fabric_import.apply(parsed, label=name, use=use)
        except FabricInputError as error:
            raise CommandError(f"{name}: {error}; nothing was written") from error
        for line in fabric_import.summary(result, dry_run):
            self.stdout.write(line)
