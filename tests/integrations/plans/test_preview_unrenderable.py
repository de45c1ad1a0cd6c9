"""A plan preview when the renderers refuse what is in the database (found by an outside test).

The renderers stop at a row they cannot render safely (a department's export path or network saved before
the rules existed, a service tier Slurm reads as a keyword) rather than writing it. The partition plan
preview renders everything before and after the plan, and let that ValueError through: POST
/api/v1/partition-plans/ with dry_run answered 500. Now the preview answers 200 with ok false and an error
finding in the renderer's words (integrations.plans.service.preview), and nothing is saved.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from inventory.models import PartitionPlan
from tenancy.models import Department
from tests.factories import make_department

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]

PLANS = "/api/v1/partition-plans/"


@pytest.fixture
def staff(demo_inventory, admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


def test_a_row_the_renderers_refuse_is_a_finding_not_a_500(staff):
    department = make_department("Ops")
    # Written around the model's validation, as a row saved before the export-path rule would be.
    Department.objects.filter(pk=department.pk).update(export_path="/exports/tenants/ops *(rw)")
    body = {
        "rack": "gb-r01",
        "layout": {"partitions": [{"name": "p1", "slots": "1-9"}, {"name": "p2", "slots": "10-18"}]},
        "dry_run": True,
    }
    response = staff.post(PLANS, body, format="json")
    assert response.status_code == 200, response.content
    preview = response.json()
    assert preview["ok"] is False
    errors = [f["message"] for f in preview["findings"] if f["level"] == "error"]
    assert any("cannot be rendered" in message and "ops" in message for message in errors), errors
    assert not PartitionPlan.objects.exists()
