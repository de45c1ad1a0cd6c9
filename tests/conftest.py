"""Fixtures shared by the whole suite: the demo inventory, the shared personas, a render directory per test.

The personas (DESIGN.md: "test with the shared personas") are fixtures over tests/factories.py:

    platform_admin  staff account "platform-admin": sees and changes everything
    lead_a          "lead-a", lead of department_a        member_a  "member-a", member of department_a
    lead_b          "lead-b", lead of department_b        member_b  "member-b", member of department_b
    outsider        "outsider": an account with no membership
    node_agent      "node-agent", made by `manage.py discovery_agent_token --fleet` (a fleet token)

department_a is Alpha and department_b is Beta, both without a guarantee (so they need no inventory). A
module that needs them otherwise overrides the fixture (`def department_a(demo_inventory): return
make_department("Research", guaranteed_gpus=96)`); the people attached to it follow.
"""

import pytest

from core.access import Role
from tests import factories

# The real identity providers' fixtures (scripts/idp-testbed.sh): oidc_provider, oidc_settings,
# ldap_directory, ldap_settings, for tests/identity and the sign-in browser tests.
# The real Prometheus scraping test DCGM exporters (tests/tenancy/prometheus_server.py): prometheus.
pytest_plugins = ["tests.identity_testbed", "tests.tenancy.prometheus_server"]


# Slow by design, in modules being written by others as this list was made: the marker belongs in the module
# (`@pytest.mark.slow`); move it there and drop the entry.
@pytest.fixture(autouse=True, scope="session")
def _fast_test_settings():
    """Two costs that are there for production, paid again by every test otherwise:
    - a fast hasher for the passwords tests set (PBKDF2's cost is for attackers); PBKDF2 stays listed so
      any hash it made still checks;
    - WhiteNoise looks a static file up when it is asked for (as with DEBUG on) instead of listing every
      static file whenever a test client starts its middleware."""
    from django.conf import settings

    if settings.configured:
        settings.PASSWORD_HASHERS = [
            "django.contrib.auth.hashers.MD5PasswordHasher",
            "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        ]
        settings.WHITENOISE_AUTOREFRESH = True


@pytest.fixture(autouse=True)
def _fresh_request_counts():
    """API throttle counts live in the cache and outlast a test's database: each test starts at zero, as if
    the suite's thousands of requests were not all from one client within a minute."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def demo_inventory(db):
    """Three seeded racks: gb-r01 (default partition, one drained tray), gb-r02 (carved 2x9), gb-r03."""
    from inventory.demo import seed_datacenter

    return seed_datacenter(racks=3)


# --- accounts that predate the personas (a superuser for the Django admin, a user without a department) ---


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


# --- the shared personas -----------------------------------------------------------------------------------


@pytest.fixture
def department_a(db):
    return factories.make_department("Alpha")


@pytest.fixture
def department_b(db):
    return factories.make_department("Beta")


@pytest.fixture
def platform_admin(db):
    return factories.make_user("platform-admin", staff=True)


@pytest.fixture
def lead_a(department_a):
    return factories.make_member("lead-a", department_a, Role.LEAD)


@pytest.fixture
def member_a(department_a):
    return factories.make_member("member-a", department_a)


@pytest.fixture
def lead_b(department_b):
    return factories.make_member("lead-b", department_b, Role.LEAD)


@pytest.fixture
def member_b(department_b):
    return factories.make_member("member-b", department_b)


@pytest.fixture
def outsider(db):
    return factories.make_user("outsider")


@pytest.fixture
def node_agent(db):
    return factories.make_node_agent()


@pytest.fixture
def api_as(request):
    """`api_as(lead_a)` or `api_as("lead_a")` (a persona fixture's name, for parametrized tests): an API
    client with that user's token."""

    def client_for(persona):
        return factories.token_client(_persona(request, persona))

    return client_for


@pytest.fixture
def client_as(request, client):
    """`client_as(lead_a)` or `client_as("lead_a")`: the Django test client, signed in as that user."""

    def login(persona):
        client.force_login(_persona(request, persona))
        return client

    return login


def _persona(request, persona):
    return request.getfixturevalue(persona) if isinstance(persona, str) else persona


# --- where rendered files go -------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def render_dir(settings, tmp_path_factory):
    """Rendered configs and jobs (the embedded backends) go to a fresh directory per test, never var/. It
    does not exist until something writes there."""
    settings.RACKPLANE_RENDER_DIR = tmp_path_factory.mktemp("render") / "rendered"
    return settings.RACKPLANE_RENDER_DIR


@pytest.fixture
def local_target(render_dir, db):
    """The embedded `local` directory target, writing into render_dir."""
    return factories.local_target()
