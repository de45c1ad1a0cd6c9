import pytest


@pytest.fixture
def demo_inventory(db):
    """Three seeded racks: gb-r01 (default partition, one drained tray), gb-r02 (carved 2x9), gb-r03."""
    from inventory.demo import seed_datacenter

    return seed_datacenter(racks=3)


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("admin", "admin@example.com", "admin-password-1")


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("operator", "operator@example.com", "operator-password-1")


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def user_client(client, user):
    client.force_login(user)
    return client


@pytest.fixture
def admin_client_logged_in(client, admin_user):
    client.force_login(admin_user)
    return client


@pytest.fixture(autouse=True)
def _render_dir(settings, tmp_path_factory):
    """Rendered configs and jobs (the embedded backends) go to a fresh folder per test, never var/."""
    settings.RACKPLANE_RENDER_DIR = tmp_path_factory.mktemp("rendered")
