import re
import stat
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

LOGIN = re.compile(r"^Admin login: (\S+) / (\S+)$", re.MULTILINE)


def ensure_admin(*args) -> tuple[str, str, str]:
    """Run the command; return (username, password) from the printed login, and the whole output."""
    out = StringIO()
    call_command("ensure_admin", *args, stdout=out)
    match = LOGIN.search(out.getvalue())
    assert match, f"no login line in: {out.getvalue()!r}"
    return match[1], match[2], out.getvalue()


@pytest.fixture
def creds(tmp_path):
    return tmp_path / "var" / "admin-credentials.txt"


@pytest.mark.django_db
def test_first_run_creates_superuser_prints_login_and_keeps_it_private(creds):
    username, password, output = ensure_admin("--credentials-file", str(creds))

    assert username == "admin"
    assert "Created superuser" in output
    user = get_user_model().objects.get(username="admin")
    assert user.is_superuser and user.is_staff and user.is_active
    assert user.check_password(password)
    assert len(password) >= 20
    assert creds.read_text() == f"Admin login: admin / {password}\n"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600


@pytest.mark.django_db
def test_second_run_prints_same_password_and_creates_no_duplicate(creds):
    _, first, _ = ensure_admin("--credentials-file", str(creds))
    _, second, output = ensure_admin("--credentials-file", str(creds))

    assert second == first
    assert "Created" not in output and "Reset" not in output
    assert get_user_model().objects.filter(username="admin").count() == 1
    assert get_user_model().objects.get(username="admin").check_password(first)


@pytest.mark.django_db
def test_missing_file_resets_password_to_a_new_one(creds):
    _, old, _ = ensure_admin("--credentials-file", str(creds))
    creds.unlink()

    _, new, output = ensure_admin("--credentials-file", str(creds))

    assert new != old
    assert "Reset the password" in output
    user = get_user_model().objects.get(username="admin")
    assert user.check_password(new) and not user.check_password(old)
    assert creds.read_text() == f"Admin login: admin / {new}\n"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600


@pytest.mark.django_db
def test_default_file_location_comes_from_settings(settings, tmp_path):
    settings.RACKPLANE_ADMIN_CREDENTIALS_FILE = tmp_path / "creds.txt"

    _, password, _ = ensure_admin()

    assert (tmp_path / "creds.txt").read_text() == f"Admin login: admin / {password}\n"


@pytest.mark.django_db
def test_other_username_is_kept_beside_admin(creds):
    _, admin_password, _ = ensure_admin("--credentials-file", str(creds))
    username, ops_password, _ = ensure_admin("--credentials-file", str(creds), "--username", "ops")

    assert username == "ops"
    assert get_user_model().objects.get(username="ops").is_superuser
    _, again, _ = ensure_admin("--credentials-file", str(creds))
    assert again == admin_password
    assert f"Admin login: ops / {ops_password}" in creds.read_text()


@pytest.mark.django_db
def test_existing_user_without_recorded_password_is_promoted_and_reset(creds, django_user_model):
    django_user_model.objects.create_user("admin", password="chosen-by-someone-1")

    _, password, output = ensure_admin("--credentials-file", str(creds))

    user = django_user_model.objects.get(username="admin")
    assert user.is_superuser and user.is_staff
    assert user.check_password(password)
    assert "Reset the password" in output


@pytest.mark.django_db
def test_stale_file_is_reported_not_printed(creds, django_user_model):
    _, password, _ = ensure_admin("--credentials-file", str(creds))
    user = django_user_model.objects.get(username="admin")
    user.set_password("changed-in-the-admin-1")
    user.save()

    with pytest.raises(CommandError, match="--reset"):
        ensure_admin("--credentials-file", str(creds))

    _, new, _ = ensure_admin("--credentials-file", str(creds), "--reset")
    assert new != password
    assert django_user_model.objects.get(username="admin").check_password(new)
