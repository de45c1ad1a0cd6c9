import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from integrations.dispatch import backend_for, dispatch_request
from integrations.embedded import RenderedJobBackend
from integrations.models import ConfigTarget
from integrations.registry import clean_settings
from inventory.choices import SystemModel
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack
from portal.demo import seed_tenants, write_demo_logins
from scheduling.choices import JobState
from scheduling.models import Job
from scheduling.services import run_pass
from scheduling.tasks import record_quota_snapshots
from tenancy.models import Department

MODELS = {"gb200": SystemModel.GB200_NVL72, "gb300": SystemModel.GB300_NVL72}


DEMO_FABRIC = "fabric"


def adopt_running_jobs() -> int:
    """Give the seeded running jobs to the embedded job backend (files under RACKPLANE_RENDER_DIR/jobs), with
    their time limits counted from when they started, so the job sync ends each at its limit as Slurm would.
    Only where no live backend is configured: demo jobs are never sent to a real Slurm or Kubernetes."""
    adopted = []
    for job in Job.objects.filter(state=JobState.RUNNING, backend_id="").order_by("pk"):
        backend, _label, values = backend_for(job.backend)
        if isinstance(backend, RenderedJobBackend):
            job.backend_id = backend.submit(dispatch_request(job, values), started_at=job.started_at)
            adopted.append(job)
    Job.objects.bulk_update(adopted, ["backend_id"])  # seed data: recorded by nothing, like its creation
    return len(adopted)


def ensure_simulated_fabric() -> bool:
    """The demo's fabric manager: a simulated one (integrations.fabric), so that a plan applied in the wizard
    re-carves the fabric and the rack's nodes report their new cliques. True when it was added now; an
    existing target of that name (the operator's) is left as it is."""
    _, created = ConfigTarget.objects.get_or_create(
        name=DEMO_FABRIC,
        defaults={"kind": "fabric", "settings": clean_settings("fabric", {"kind": "simulated"})},
    )
    return created


class Command(BaseCommand):
    help = (
        "Seed a realistic, deterministic demo datacenter of NVL72 racks, its departments and jobs. "
        "Does nothing if racks exist, so running it again changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--racks", type=int, default=8, help="number of NVL72 racks (default 8)")
        parser.add_argument("--model", choices=sorted(MODELS), default="gb200", help="system model")
        parser.add_argument("--seed", type=int, default=7, help="random seed (same seed, same datacenter)")
        parser.add_argument("--reset", action="store_true", help="delete the existing inventory first")
        parser.add_argument(
            "--no-tenants", action="store_true", help="inventory only: no departments or jobs"
        )

    def handle(self, *args, racks, model, seed, reset, no_tenants, **options):
        if racks < 1:
            raise CommandError("--racks must be at least 1")
        existing = Rack.objects.count()
        if existing and not reset:
            self.stdout.write(
                f"Inventory already has {existing} racks; nothing seeded (use --reset to replace)."
            )
            return
        started = time.perf_counter()
        with transaction.atomic():
            if reset:
                Job.objects.all().delete()
                Department.objects.all().delete()
                Gpu.objects.all().delete()
                ComputeTray.objects.all().delete()
                NVLinkPartition.objects.all().delete()
                Rack.objects.all().delete()
            result = seed_datacenter(racks=racks, system_model=MODELS[model], seed=seed)
            tenants = None if no_tenants else seed_tenants(seed=seed)
            fabric = ensure_simulated_fabric()
            adopt_running_jobs()
        if connection.vendor == "postgresql":
            # Fresh statistics after a bulk insert, or the planner scans all GPUs for the first pages.
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        self.stdout.write(
            self.style.SUCCESS(
                f"Seeded {result.racks} racks, {result.trays} trays, {result.gpus} GPUs, "
                f"{result.partitions} NVLink partitions in {time.perf_counter() - started:.1f}s."
            )
        )
        if fabric:
            self.stdout.write(
                f"Added the configuration target {DEMO_FABRIC!r}: a simulated NVLink fabric manager whose "
                "nodes report their new cliques after a partition plan, as real node agents would."
            )
        if tenants is not None:
            # The queued demo jobs go through the real scheduler: they start, or wait with the true reason.
            summary = run_pass()
            if summary is not None:
                self.stdout.write(
                    f"First scheduling pass: {summary.started} jobs started, {summary.waiting} waiting."
                )
            record_quota_snapshots()  # the history's last point counts what the pass started
            logins = settings.VAR_DIR / "demo-logins.txt"
            write_demo_logins(logins, tenants)
            self.stdout.write(
                f"Seeded {tenants.departments} departments and {tenants.jobs} jobs. Demo logins "
                f"({', '.join(tenants.users)}) share the password {tenants.password} (also in {logins.name})."
            )
