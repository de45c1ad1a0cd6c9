"""Where `rp` keeps the portal's address and the person's token: `$XDG_CONFIG_HOME/rackplane/rp.json`
(`~/.config/rackplane/rp.json` without it), the folder made 0700 and the file written 0600, atomically.

A file that others may read or write (any group/other bit), that another account owns, or that is a symbolic
link is refused with the command that fixes it: it holds an API token. RP_URL and RP_TOKEN in the environment
(both) take the place of the file, for CI jobs that keep the token in their own secret store.
"""

from __future__ import annotations

import ipaddress
import json
import os
import stat
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from rpcli.errors import Exit, RpError

FILE_MODE = 0o600
DIR_MODE = 0o700
MAX_CONFIG_BYTES = 64 * 1024
MAX_TOKEN = 4096
AGENT_TOKEN_PREFIX = "rpa_"


@dataclass(frozen=True)
class Config:
    url: str  # the portal's address, without a trailing slash (https://rackplane.example.org)
    token: str


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    # The XDG spec: a relative XDG_CONFIG_HOME is invalid and to be ignored.
    folder = Path(base) if base and os.path.isabs(base) else Path.home() / ".config"
    return folder / "rackplane" / "rp.json"


def check_url(raw: str) -> str:
    """The portal's address, normalised (no trailing slash), or RpError(USAGE) saying what is wrong with it:
    only http and https, a host, no user name or password in it (the token is the credential), no query or
    fragment, no spaces or control characters."""
    text = raw.strip()
    if not text or any(ch.isspace() or not ch.isprintable() for ch in text):
        raise RpError(
            Exit.USAGE, f"{raw!r} is not a URL: give the portal's address, e.g. https://rackplane.example.org"
        )
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port  # ValueError when out of range or not a number
    except ValueError as error:
        raise RpError(Exit.USAGE, f"{text!r} is not a valid URL ({error})") from error
    if parts.scheme.lower() not in ("http", "https"):
        raise RpError(
            Exit.USAGE,
            f"{text!r}: only http:// and https:// addresses are accepted (not {parts.scheme or 'none'!r})",
        )
    if not parts.hostname:
        raise RpError(Exit.USAGE, f"{text!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise RpError(
            Exit.USAGE,
            f"{text!r}: leave the user name and password out of the URL (the token is the credential)",
        )
    if parts.query or parts.fragment:
        raise RpError(Exit.USAGE, f"{text!r}: give the portal's address without a query or fragment")
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if port is not None:
        netloc += f":{port}"
    path = parts.path.rstrip("/")
    for api in ("/api/v1", "/api"):  # the API's address given for the portal's: rp adds /api/v1/ itself
        path = path.removesuffix(api) if path.endswith(api) else path
    return urllib.parse.urlunsplit((parts.scheme.lower(), netloc, path, "", ""))


def is_plain_http_elsewhere(url: str) -> bool:
    """An http:// address of another machine: the token would cross the network in clear."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http":
        return False
    host = parts.hostname or ""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def check_token(raw: str) -> str:
    token = raw.strip()
    if not token:
        raise RpError(
            Exit.USAGE, "no token given: make one on the portal's API tokens page (/account/tokens/)"
        )
    if len(token) > MAX_TOKEN or not (token.isascii() and token.isprintable()) or " " in token:
        raise RpError(
            Exit.USAGE,
            "that is not an API token (printable ASCII without spaces, e.g. rpt_ and 43 characters)",
        )
    if token.startswith(AGENT_TOKEN_PREFIX):
        raise RpError(
            Exit.USAGE,
            "that is a node agent's token (rpa_...), which only reaches the agents' endpoints: make a "
            "personal token (rpt_...) on the portal's API tokens page (/account/tokens/)",
        )
    return token


def from_environment() -> Config | None:
    url, token = os.environ.get("RP_URL"), os.environ.get("RP_TOKEN")
    if not url and not token:
        return None
    if not (url and token):
        raise RpError(Exit.USAGE, "set both RP_URL and RP_TOKEN, or neither (then rp reads its config file)")
    return Config(check_url(url), check_token(token))


def load(path: Path | None = None) -> Config:
    """The environment's RP_URL and RP_TOKEN, else the config file; RpError(AUTH) when there is neither (not
    logged in), RpError(USAGE) when the file is unsafe or unreadable."""
    found = from_environment()
    if found is not None:
        return found
    path = path or config_path()
    data = _read_private(path)
    if data is None:
        raise RpError(Exit.AUTH, "not logged in: run `rp login --url https://your-portal` first")
    try:
        values = json.loads(data)
    except (ValueError, RecursionError):
        values = None
    if (
        not isinstance(values, dict)
        or not isinstance(values.get("url"), str)
        or not isinstance(values.get("token"), str)
    ):
        raise RpError(Exit.USAGE, f"{path} is not an rp config file: run `rp login` again (it rewrites it)")
    try:
        return Config(check_url(values["url"]), check_token(values["token"]))
    except RpError as error:
        raise RpError(Exit.USAGE, f"{path}: {error.message}; run `rp login` again") from error


def _read_private(path: Path) -> bytes | None:
    """The file's bytes, None when it does not exist; refused unless it is a regular file of this account
    that nobody else may read or write, in a folder nobody else may write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as error:
        if os.path.islink(path):
            raise RpError(
                Exit.USAGE, f"{path} is a symbolic link: rp reads its token only from a file of its own"
            ) from error
        raise RpError(Exit.USAGE, f"{path} cannot be read: {error.strerror or error}") from error
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        _refuse_unsafe(path, info)
        folder = os.stat(path.parent)
        if folder.st_mode & 0o022 or folder.st_uid != os.getuid():
            raise RpError(
                Exit.USAGE,
                f"refusing to read {path}: its folder {path.parent} can be written by others "
                f"(mode {stat.S_IMODE(folder.st_mode):04o}): run `chmod 700 {path.parent}`",
            )
        data = handle.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise RpError(Exit.USAGE, f"{path} is too large to be an rp config file: run `rp login` again")
    return data


def _refuse_unsafe(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise RpError(Exit.USAGE, f"{path} is not a regular file")
    if info.st_uid != os.getuid():
        raise RpError(Exit.USAGE, f"refusing to read {path}: another account owns it (it holds an API token)")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise RpError(
            Exit.USAGE,
            f"refusing to read {path}: others can read or write it (mode {mode:04o}) and it holds your API "
            f"token. Run `chmod 600 {path}`, and revoke the token on the portal's API tokens page if someone "
            "else may have read it.",
        )


def save(config: Config, path: Path | None = None) -> Path:
    """Write the file atomically, 0600, in a 0700 folder (made if missing; ours tightened if looser)."""
    path = path or config_path()
    folder = path.parent
    folder.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    info = os.stat(folder)
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != DIR_MODE:
        os.chmod(folder, DIR_MODE)
    temporary = folder / f".rp.json.{os.getpid()}.tmp"
    body = json.dumps({"url": config.url, "token": config.token}, indent=2) + "\n"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)  # whatever the umask
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def remove(path: Path | None = None) -> Path | None:
    """Delete the file; its path, or None when there was none."""
    path = path or config_path()
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    return path
