import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from inventory.discovery.nvidia_smi import ReportError, parse_any, validate_report
from inventory.ingest.reports import check_report, ingest_report
from inventory.ingest.results import UnknownHost


class Command(BaseCommand):
    help = (
        "Read one node's nvidia-smi output (-q text, -q -x XML, or the compact --query-gpu CSV; "
        "the format is detected), print what it says about the node's NVLink fabric as one JSON "
        "object, and reconcile the inventory with it unless --dry-run."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", required=True, help="hostname of the compute tray that produced FILE")
        parser.add_argument("file", help="nvidia-smi output file, or - for standard input")
        parser.add_argument("--dry-run", action="store_true", help="check the report, write nothing")

    def handle(self, *args, host, file, dry_run, **options):
        try:
            text = (
                sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8", errors="replace")
            )
        except OSError as error:
            raise CommandError(f"cannot read {file}: {error.strerror}") from error
        try:
            fmt, gpus = parse_any(text)
            # The same check the API applies (ingest_report repeats it): refusals name the problem.
            gpus = validate_report(gpus)
            result = check_report(host, fmt, gpus) if dry_run else ingest_report(host, fmt, gpus)
        except ReportError as error:
            raise CommandError(
                f"{file}: not usable nvidia-smi output: {error}; nothing was written"
            ) from error
        except UnknownHost as error:
            raise CommandError(
                f"{error}; nothing was written (--dry-run checks a report on its own)"
            ) from error

        self.stdout.write(json.dumps(result.report.as_dict()))
        summary = result.changes()
        if any(summary[key] for key in ("drift", "created_gpus", "moved_gpus", "removed_gpus")) or dry_run:
            self.stderr.write(json.dumps(summary))
