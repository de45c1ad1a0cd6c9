"""The departments list sorted by its Storage column: by storage quota, then by export path (what the column
shows). Departments with equal quotas come one way up for ?sort=storage and the other way down for
?sort=-storage, instead of the same order both ways; the CSV export follows the same order."""

import csv
import io
import re

import pytest
from django.urls import reverse

from tenancy.models import Department
from tests import factories

pytestmark = pytest.mark.django_db
URL = reverse("scheduling:department-list")


@pytest.fixture
def equal_quotas(db):
    """Four departments: three with the same 2048 GiB quota, one with less; export paths set apart."""
    for name, storage, path in (
        ("Mars", 2048, "/exports/c-mars"),
        ("Neptune", 2048, "/exports/a-neptune"),
        ("Venus", 2048, "/exports/b-venus"),
        ("Pluto", 512, "/exports/z-pluto"),
    ):
        department = factories.make_department(name, storage_quota_gib=storage)
        Department.objects.filter(pk=department.pk).update(export_path=path)


def names(client, sort: str) -> list[str]:
    response = client.get(URL, {"sort": sort})
    assert response.status_code == 200
    return re.findall(r'class="dept-link"[^>]*>([^<]+)<', response.content.decode())


def test_storage_sorts_by_quota_then_export_path_both_ways(client_as, platform_admin, equal_quotas):
    client = client_as(platform_admin)
    ascending = ["Pluto", "Neptune", "Venus", "Mars"]  # 512 GiB first, then the 2048s by path a-, b-, c-
    assert names(client, "storage") == ascending
    assert names(client, "-storage") == ascending[::-1]


def test_the_storage_column_says_how_it_sorts_and_the_export_follows(client_as, platform_admin, equal_quotas):
    client = client_as(platform_admin)
    html = client.get(URL, {"sort": "storage"}).content.decode()
    assert "Sorted by storage quota, then export path" in html
    response = client.get(URL, {"sort": "-storage", "export": "csv"})
    assert response.status_code == 200
    content = b"".join(response.streaming_content) if response.streaming else response.content
    rows = list(csv.DictReader(io.StringIO(content.decode())))
    assert [row["name"] for row in rows] == ["Mars", "Venus", "Neptune", "Pluto"]
