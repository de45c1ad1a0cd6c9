"""`module_rows` (tests/conftest.py): rows made once for a module are there in each of its tests, what one
test writes is gone for the next, and nothing of them is left when the module ends. The tests run in
written order, in one worker (a module-scoped fixture groups them)."""

import pytest

from tenancy.models import Department
from tests.factories import make_department


@pytest.fixture(scope="module")
def _nothing_left_after_the_module(django_db_blocker):
    """Set up before `module_rows`, so torn down after it: the module's rows are gone by then."""
    yield
    with django_db_blocker.unblock():
        assert not Department.objects.filter(name__in=["Once", "Bytest"]).exists()


@pytest.fixture(scope="module")
def made_once(_nothing_left_after_the_module, module_rows):
    return module_rows(lambda: make_department("Once").pk)


@pytest.mark.django_db
def test_the_modules_rows_are_there_and_a_test_writes_its_own(made_once):
    assert Department.objects.get(pk=made_once).name == "Once"
    make_department("Bytest")


@pytest.mark.django_db
def test_the_next_test_has_the_modules_rows_and_not_the_last_tests(made_once):
    assert Department.objects.filter(pk=made_once).exists()
    assert not Department.objects.filter(name="Bytest").exists()


@pytest.mark.django_db
def test_one_set_of_rows_per_module(made_once, module_rows):
    with pytest.raises(RuntimeError, match="one set of rows per module"):
        module_rows(lambda: None)
