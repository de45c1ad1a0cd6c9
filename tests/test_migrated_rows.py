"""The rows the data migrations made (the default health rules, the local configuration target) are there in
every test, also after a transactional test emptied every table: tests/conftest.py puts them back when such a
test ends, since an xdist worker takes tests in any order (in one process pytest-django would run the
transactional tests last).

Both tests are transactional (pytest-django keeps their written order) and share a module-scoped fixture,
so they run in one worker, the second after the first's flush."""

import pytest

from integrations.models import ConfigTarget
from inventory.models import HealthRule


@pytest.fixture(scope="module")
def _one_worker():
    """Module-scoped: the module's tests run in one worker, in order (tests/conftest.py groups them)."""


def migrated_rows() -> tuple[list[str], list[str]]:
    return (
        sorted(HealthRule.objects.values_list("name", flat=True)),
        sorted(ConfigTarget.objects.values_list("name", flat=True)),
    )


SEEN: list[tuple[list[str], list[str]]] = []


@pytest.mark.django_db(transaction=True)
def test_a_transactional_test_starts_with_the_migrated_rows(_one_worker):
    rules, targets = migrated_rows()
    assert rules and targets, (rules, targets)
    SEEN.append((rules, targets))
    HealthRule.objects.all().delete()  # and its flush at the end empties the rest


@pytest.mark.django_db(transaction=True)
def test_the_next_test_has_them_again_after_the_flush(_one_worker):
    if not SEEN:  # `-n N` without `--dist loadgroup` spreads a module over workers; make test groups it
        pytest.skip("the first test ran in another worker: run with --dist loadgroup, as make test does")
    assert migrated_rows() == SEEN[0]
