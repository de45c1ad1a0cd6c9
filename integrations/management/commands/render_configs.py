import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from integrations import state as configstate
from integrations.embedded import write_tree
from integrations.slurm.target import RACKPLANE_CONF, TOPOLOGY_YAML


class Command(BaseCommand):
    help = (
        "Write every file the current state would push (slurm/topology.conf, slurm/rackplane.conf, "
        "kubernetes/NN-<kind>s.yaml, opensm/partitions.conf, nfs/exports) into DIR. Changes nothing else."
    )

    def add_arguments(self, parser):
        parser.add_argument("--out", required=True, help="directory to write into (created if missing)")
        parser.add_argument(
            "--topology-format",
            choices=["conf", "yaml"],
            default="conf",
            help="conf: topology.conf for Slurm 24.11 (default); yaml: topology.yaml for Slurm 25.05+, where "
            "blocks may be smaller than the base block size and the compute fabric's tree is added",
        )

    def handle(self, *args, out, topology_format, **options):
        started = time.perf_counter()
        try:
            state = configstate.build_state()
            files = configstate.render_files(state)
            if topology_format == "yaml":
                slurm = configstate.slurm_files(state, topology_format=topology_format)
                del files[configstate.SLURM_TOPOLOGY]
                files[configstate.SLURM_TOPOLOGY_YAML] = slurm[TOPOLOGY_YAML]
                files[configstate.SLURM_RACKPLANE] = slurm[RACKPLANE_CONF]
        except ValueError as error:
            raise CommandError(f"the configuration cannot be rendered: {error}") from error
        rendered = time.perf_counter() - started
        try:
            paths = write_tree(Path(out), files)
        except OSError as error:
            raise CommandError(f"cannot write into {out}: {error}") from error
        for problem in state.problems:
            self.stderr.write(self.style.WARNING(f"left out: {problem}"))
        for name, path in zip(sorted(files), paths, strict=True):
            self.stdout.write(f"{path}  {len(files[name].encode()):,} bytes")
        self.stdout.write(
            self.style.SUCCESS(
                f"Rendered {len(files)} files for {state.rack_count} racks in {rendered:.2f}s into {out}."
            )
        )
