"""Gunicorn hooks for `rackplane serve` (portal.ops.cli passes `--config python:portal.ops.gunicorn_conf`).

The command-line options come from portal.ops.cli.serve_command; only what gunicorn takes as hooks lives here.
"""

import os


def child_exit(server, worker):
    """A worker process is gone: drop its live gauges from the shared metrics folder (core.metrics)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
