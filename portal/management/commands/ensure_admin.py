"""Make sure there is a superuser to log in with, and tell the developer its password.

`make run` calls this on every start. The first run creates the user with a random password and keeps the
login in var/admin-credentials.txt (mode 600, var/ is not committed); later runs print the same login. When
the user exists but the file is gone, the password is no longer known to anyone: it is reset to a new
random one and written down again.
"""

import os
import re
import secrets
import tempfile
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

LINE = re.compile(r"^Admin login: (?P<username>\S+) / (?P<password>\S+)$")


def default_credentials_file() -> Path:
    default = settings.VAR_DIR / "admin-credentials.txt"
    return Path(getattr(settings, "RACKPLANE_ADMIN_CREDENTIALS_FILE", default))


def login_line(username: str, password: str) -> str:
    return f"Admin login: {username} / {password}"


def read_credentials(path: Path) -> dict[str, str]:
    """username -> password, from the lines this command writes; other lines are ignored."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    found = {}
    for line in text.splitlines():
        match = LINE.match(line.strip())
        if match:
            found[match["username"]] = match["password"]
    return found


def write_credentials(path: Path, credentials: dict[str, str]) -> None:
    """Replace the file atomically; it is readable by its owner only, from the moment it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp creates it with mode 600
    try:
        with os.fdopen(fd, "w") as handle:
            for username, password in sorted(credentials.items()):
                handle.write(login_line(username, password) + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def new_password() -> str:
    return secrets.token_urlsafe(18)


class Command(BaseCommand):
    help = (
        "Create the superuser (default 'admin') with a random password if it does not exist, keep the login "
        "in var/admin-credentials.txt (mode 600) and print it. If the user exists but the file is missing, "
        "reset the password to a new random one."
    )

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin", help="superuser name (default: admin)")
        parser.add_argument(
            "--credentials-file",
            type=Path,
            default=None,
            help="where the login is kept (default: var/admin-credentials.txt)",
        )
        parser.add_argument(
            "--reset", action="store_true", help="set a new random password even if the stored one works"
        )

    def handle(self, *args, username, credentials_file, reset, **options):
        path = credentials_file or default_credentials_file()
        if not username.strip() or any(ch.isspace() for ch in username):
            raise CommandError("--username must be a name without white space")
        User = get_user_model()
        stored = read_credentials(path)

        with transaction.atomic():
            user = User.objects.select_for_update().filter(**{User.USERNAME_FIELD: username}).first()
            password = stored.get(username)
            if user is None:
                password = new_password()
                user = User.objects.create_superuser(username=username, email="", password=password)
                self.stdout.write(f"Created superuser {username!r}.")
            elif reset or password is None:
                password = new_password()
                user.set_password(password)
                user.save(update_fields=["password"])
                why = "--reset" if reset else f"its password was not on record in {path}"
                self.stdout.write(f"Reset the password of {username!r} ({why}).")
            elif not user.check_password(password):
                raise CommandError(
                    f"The password of {username!r} was changed since {path} was written; the file is stale. "
                    f"Run `manage.py ensure_admin --username {username} --reset` for a new one."
                )
            self._ensure_superuser(user)

        if stored.get(username) != password:
            write_credentials(path, {**stored, username: password})
        else:
            os.chmod(path, 0o600)
        self.stdout.write(login_line(username, password))

    def _ensure_superuser(self, user):
        changed = [
            field for field in ("is_active", "is_staff", "is_superuser") if not getattr(user, field, True)
        ]
        if changed:
            for field in changed:
                setattr(user, field, True)
            user.save(update_fields=changed)
            fixed = ", ".join(changed)
            self.stdout.write(f"Made {user.get_username()!r} an active superuser again ({fixed}).")
