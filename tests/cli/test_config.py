"""rp's config file and the addresses and tokens it accepts (rpcli/config.py), without a server."""

from __future__ import annotations

import json
import os
import stat
import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rpcli import config
from rpcli.config import Config
from rpcli.errors import Exit, RpError

TOKEN = "rpt_" + "a" * 43


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("RP_URL", raising=False)
    monkeypatch.delenv("RP_TOKEN", raising=False)
    return tmp_path / "config" / "rackplane" / "rp.json"


def refused(call, *args) -> RpError:
    with pytest.raises(RpError) as caught:
        call(*args)
    return caught.value


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://portal.example.org", "only http:// and https://"),
        ("file:///etc/passwd", "only http:// and https://"),
        ("javascript:alert(1)", "only http:// and https://"),
        ("portal.example.org", "only http:// and https://"),
        ("https://", "names no host"),
        ("https://alice:secret@portal.example.org", "leave the user name and password out"),
        ("https://portal.example.org/?next=/x", "without a query or fragment"),
        ("https://portal.example.org:99999", "not a valid URL"),
        ("https://portal example.org", "is not a URL"),
        ("https://portal.example.org/\x1b[2J", "is not a URL"),
        ("", "is not a URL"),
    ],
)
def test_an_address_that_is_not_a_portals_is_refused(url, words):
    error = refused(config.check_url, url)
    assert error.code == Exit.USAGE and words in error.message


def test_an_address_is_normalised():
    assert (
        config.check_url(" HTTPS://Portal.Example.org:8443/rackplane/ ")
        == "https://portal.example.org:8443/rackplane"
    )
    assert config.check_url("http://[::1]:8000") == "http://[::1]:8000"
    assert config.check_url("https://portal.example.org/api/v1/") == "https://portal.example.org"
    assert (
        config.check_url("https://portal.example.org/rackplane/api") == "https://portal.example.org/rackplane"
    )


@given(st.text(max_size=80))
def test_any_text_is_refused_or_becomes_a_plain_http_address(text):
    try:
        url = config.check_url(text)
    except RpError as error:
        assert error.code == Exit.USAGE
        return
    parts = urllib.parse.urlsplit(url)
    assert parts.scheme in ("http", "https") and parts.hostname
    assert parts.username is None and parts.password is None and not parts.query and not parts.fragment
    assert url.isprintable() and " " not in url


def test_plain_http_is_only_quiet_on_this_machine():
    assert not config.is_plain_http_elsewhere("http://127.0.0.1:8000")
    assert not config.is_plain_http_elsewhere("http://localhost:8000")
    assert not config.is_plain_http_elsewhere("https://portal.example.org")
    assert config.is_plain_http_elsewhere("http://portal.example.org")


@pytest.mark.parametrize(
    ("token", "words"),
    [
        ("", "no token given"),
        ("rpt_abc def", "not an API token"),
        ("rpt_\x1b[2J", "not an API token"),
        ("rpt_é", "not an API token"),
        ("x" * 5000, "not an API token"),
        ("rpa_" + "b" * 43, "node agent's token"),
    ],
)
def test_what_is_not_a_personal_token_is_refused(token, words):
    error = refused(config.check_token, token)
    assert error.code == Exit.USAGE and words in error.message


def test_the_file_is_written_0600_in_a_0700_folder_whatever_the_umask(xdg):
    old = os.umask(0)
    try:
        path = config.save(Config("https://portal.example.org", TOKEN))
    finally:
        os.umask(old)
    assert path == xdg
    assert stat.S_IMODE(xdg.stat().st_mode) == 0o600
    assert stat.S_IMODE(xdg.parent.stat().st_mode) == 0o700
    assert config.load() == Config("https://portal.example.org", TOKEN)
    assert [p.name for p in xdg.parent.iterdir()] == ["rp.json"]  # no temporary file left


def test_a_folder_of_ours_that_others_could_enter_is_tightened(xdg):
    xdg.parent.mkdir(parents=True, mode=0o755)
    xdg.parent.chmod(0o755)
    config.save(Config("https://portal.example.org", TOKEN))
    assert stat.S_IMODE(xdg.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o666])
def test_a_file_others_can_read_or_write_is_refused_saying_how_to_fix_it(xdg, mode):
    config.save(Config("https://portal.example.org", TOKEN))
    xdg.chmod(mode)
    error = refused(config.load)
    assert error.code == Exit.USAGE
    assert f"mode {mode:04o}" in error.message and f"chmod 600 {xdg}" in error.message


def test_a_folder_others_can_write_is_refused(xdg):
    config.save(Config("https://portal.example.org", TOKEN))
    xdg.parent.chmod(0o777)
    error = refused(config.load)
    assert error.code == Exit.USAGE and f"chmod 700 {xdg.parent}" in error.message


def test_a_symbolic_link_is_refused(xdg, tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"url": "https://evil.example.org", "token": TOKEN}))
    elsewhere.chmod(0o600)
    xdg.parent.mkdir(parents=True, mode=0o700)
    xdg.symlink_to(elsewhere)
    error = refused(config.load)
    assert error.code == Exit.USAGE and "symbolic link" in error.message


@pytest.mark.parametrize(
    "content",
    [b"not json", b"[]", b'{"url": "ftp://x", "token": "rpt_x"}', b'{"url": "https://x"}', b"[" * 100_000],
)
def test_a_broken_file_asks_to_log_in_again(xdg, content):
    xdg.parent.mkdir(parents=True, mode=0o700)
    xdg.write_bytes(content)
    xdg.chmod(0o600)
    error = refused(config.load)
    assert error.code == Exit.USAGE and "rp login" in error.message


def test_no_file_is_not_logged_in(xdg):
    error = refused(config.load)
    assert error.code == Exit.AUTH and "not logged in" in error.message


def test_the_environment_takes_the_files_place(xdg, monkeypatch):
    monkeypatch.setenv("RP_URL", "https://ci.example.org/")
    monkeypatch.setenv("RP_TOKEN", TOKEN)
    assert config.load() == Config("https://ci.example.org", TOKEN)
    monkeypatch.delenv("RP_TOKEN")
    assert refused(config.load).code == Exit.USAGE


def test_without_xdg_config_home_the_file_is_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config.config_path() == tmp_path / ".config" / "rackplane" / "rp.json"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/ignored")
    assert config.config_path() == tmp_path / ".config" / "rackplane" / "rp.json"


def test_logout_removes_the_file(xdg):
    config.save(Config("https://portal.example.org", TOKEN))
    assert config.remove() == xdg and not xdg.exists()
    assert config.remove() is None
