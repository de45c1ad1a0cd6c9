"""The `demo_inventory` fixture writes seed_datacenter's rows again from what it kept of the first seed
(tests/conftest.py): the same rows, column by column, with the time columns moved to the moment of the
second seed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from inventory.demo import seed_datacenter
from tests.conftest import _demo_models, _insert_demo_rows, _keep_demo_rows

pytestmark = pytest.mark.django_db


def _rows(model) -> tuple[list, list]:
    """(every row without its time columns, the time columns' values) of `model`'s table, by primary key."""
    fields = model._meta.concrete_fields
    times = [f.attname for f in fields if isinstance(f, models.DateTimeField)]
    others = [f.attname for f in fields if f.attname not in times]
    by_pk = model.objects.order_by("pk")
    return list(by_pk.values_list(*others)), [v for row in by_pk.values_list(*times) for v in row if v]


def test_the_kept_rows_are_written_again_as_seed_datacenter_wrote_them():
    tables = _demo_models()
    point = transaction.savepoint()
    result = seed_datacenter(racks=3)
    seeded = {model: _rows(model) for model in tables}
    kept = _keep_demo_rows(tables, result)
    transaction.savepoint_rollback(point)
    assert not any(model.objects.exists() for model in tables)

    kept["at"] -= timedelta(hours=1)  # as if kept an hour ago: the rows' times move forward by that hour
    for _table, _fields, times, rows in kept["tables"]:
        for row in rows:
            for i in times:
                row[i] = row[i] and row[i] - timedelta(hours=1)
    before = timezone.now()
    assert _insert_demo_rows(kept) == result
    for model in tables:
        rows, moments = _rows(model)
        assert rows == seeded[model][0], model
        assert moments and len(moments) == len(seeded[model][1]), model
        assert all(before - timedelta(seconds=5) <= moment <= timezone.now() for moment in moments), model
    assert (result.racks, result.trays, result.gpus) == (3, 54, 216)


def test_a_second_seed_into_an_inventory_that_is_not_empty_is_refused_by_its_keys():
    """The kept rows are only written into an empty inventory (the fixture checks first): their keys
    would collide with the seed's own."""
    tables = _demo_models()
    result = seed_datacenter(racks=3)
    kept = _keep_demo_rows(tables, result)
    with pytest.raises(IntegrityError), transaction.atomic():
        _insert_demo_rows(kept)


def test_seed_datacenter_writes_no_table_the_kept_rows_leave_out():
    """The kept rows cover the four tables seed_datacenter writes: a table it starts writing must join
    tests/conftest.py's _DEMO_MODELS, or the fixture's second seed would leave its rows out."""
    from django.apps import apps

    kept = set(_demo_models())
    others = [model for model in apps.get_models() if model not in kept and model._meta.managed]
    before = {model: model.objects.count() for model in others}
    seed_datacenter(racks=3)
    assert {model._meta.label: model.objects.count() for model in others} == {
        model._meta.label: count for model, count in before.items()
    }
