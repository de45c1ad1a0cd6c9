"""The inventory's tasks: writing the node heartbeats the web processes queued on the broker
(inventory.ingest.heartbeats), on the beat's flush-heartbeats entry."""

from __future__ import annotations

import logging

from celery import shared_task

from core.task_names import FLUSH_HEARTBEATS
from inventory.ingest import heartbeats

logger = logging.getLogger(__name__)


@shared_task(name=FLUSH_HEARTBEATS)
def flush_heartbeats() -> int:
    """Beat: the queued last-seen times written, one batch (two UPDATEs per 5,000 trays)."""
    written = heartbeats.flush_heartbeats()
    if written:
        logger.info("heartbeats: last-seen time of %d trays written", written)
    return written
