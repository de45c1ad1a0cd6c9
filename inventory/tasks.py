from celery import shared_task

from inventory.choices import PlanStatus
from inventory.models import PartitionPlan
from inventory.plans import follow
from portal.audit import audit_context
from portal.models import AuditSource


@shared_task
def follow_active_plans() -> int:
    """Move draining plans on once their trays are free, and settle applying plans from their pushes."""
    moved = 0
    with audit_context(AuditSource.TASK):
        for plan in PartitionPlan.objects.filter(status__in=[PlanStatus.DRAINING, PlanStatus.APPLYING]):
            before = plan.status
            moved += follow(plan).status != before
    return moved
