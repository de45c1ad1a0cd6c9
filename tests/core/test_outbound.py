"""The outbound guard (core.outbound, docs/outbound.md): every IPv6 form that carries a private, loopback or
link-local IPv4 address is refused when a webhook, a configuration target or the metrics source is saved,
and again when a connection is made (to a real server on 127.0.0.1 that must get no request); a redirect to
another host does not share the first hop's allowance."""

from __future__ import annotations

import ipaddress
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from core import outbound
from core.destinations import check_webhook_url
from core.errors import ExternalError
from core.http import HttpClient
from core.models import SUBSCRIBABLE_EVENTS, NotificationSubscription
from core.outbound import OutboundRefused, address_problem

# Forms that carry 10.0.0.1 (private), 127.0.0.1 (loopback) or 169.254.169.254 (link-local), and the
# other non-public IPv6 ranges the brief names. Several of these were accepted before the guard.
EMBEDDED = [
    ("http://[::ffff:10.0.0.1]/hook", "private"),  # IPv4-mapped
    ("http://[::10.0.0.1]/hook", "IPv4-compatible"),  # IPv4-compatible (deprecated)
    ("http://[::127.0.0.1]/hook", "IPv4-compatible"),
    ("http://[::ffff:0:10.0.0.1]/hook", "private"),  # IPv4-translated (SIIT)
    ("http://[2002:0a00:0001::]/hook", "private"),  # 6to4 of 10.0.0.1
    ("http://[2002:7f00:1::1]/hook", "loopback"),  # 6to4 of 127.0.0.1
    ("http://[2002:a9fe:a9fe::]/hook", "link-local"),  # 6to4 of 169.254.169.254
    ("http://[64:ff9b::a00:1]/hook", "private"),  # NAT64 well-known prefix
    ("http://[64:ff9b::7f00:1]/hook", "loopback"),
    ("http://[64:ff9b::a9fe:a9fe]/hook", "link-local"),
    ("http://[64:ff9b:1::a00:1]/hook", "local-use NAT64"),  # RFC 8215 local-use prefix
    ("http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/hook", "private"),  # Teredo, client 10.0.0.1 inverted
    ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook", "loopback"),  # Teredo, client 127.0.0.1
    ("http://[::5efe:10.0.0.1]/hook", "reserved"),  # ISATAP interface id, no prefix
    ("http://[2400:cb00::5efe:a00:1]/hook", "private"),  # ISATAP under a global prefix
    ("http://[2400:cb00::200:5efe:7f00:1]/hook", "loopback"),  # ISATAP, universal form
    ("http://[fec0::1]/hook", "site-local"),
    ("http://[fc00::1]/hook", "unique-local"),
    ("http://[fd12:3456::1]/hook", "unique-local"),
    ("http://0x7f.1/hook", "four decimal numbers"),
    ("http://2130706433/hook", "four decimal numbers"),
    ("http://0177.0.0.1/hook", "four decimal numbers"),
    ("http://127.1/hook", "four decimal numbers"),
    ("http://100.64.0.1/hook", "shared"),
    ("http://198.18.0.1/hook", "benchmarking"),
    ("http://192.0.2.1/hook", "documentation"),
    ("http://[2001:db8::1]/hook", "documentation"),
    ("http://240.0.0.1/hook", "reserved"),
    ("http://224.0.0.1/hook", "multicast"),
    ("http://100.100.100.200/hook", "metadata"),
    ("http://[fd00:ec2::254]/hook", "metadata"),
]
ALL_EVENTS = [value for value, _ in SUBSCRIBABLE_EVENTS]


# --- the table, at save ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "why"), EMBEDDED)
def test_every_embedded_form_is_refused_by_the_webhook_check(settings, url, why):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False
    with pytest.raises(ValidationError) as refused:
        check_webhook_url(url)
    assert why in " ".join(refused.value.messages)


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "why"), EMBEDDED)
def test_every_embedded_form_is_refused_by_model_clean_as_in_the_django_admin(settings, url, why):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False
    subscription = NotificationSubscription(
        name="pager", channel="webhook", url=url, secret="s" * 20, events=["tray_drained"]
    )
    with pytest.raises(ValidationError) as refused:
        subscription.full_clean()
    assert why in " ".join(refused.value.message_dict["url"])


@pytest.mark.slow(reason="31 cases, each a full request through the stack")
@pytest.mark.django_db
@pytest.mark.parametrize(("url", "why"), EMBEDDED)
def test_every_embedded_form_is_refused_by_the_portal_form(client_as, platform_admin, settings, url, why):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False
    response = client_as(platform_admin).post(
        reverse("notification-new", args=["webhook"]), {"name": "pager", "url": url, "events": ALL_EVENTS}
    )
    assert response.status_code == 400
    page = response.content.decode()
    # Django's URL field refuses the numbers-only hosts before the guard does: refused either way.
    assert why in page or (why == "four decimal numbers" and "Enter a valid URL" in page)
    assert not NotificationSubscription.objects.exists()


def test_public_addresses_and_their_embeddings_pass():
    for address in (
        "8.8.8.8",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::",
    ):
        assert address_problem(address) is None, address


# --- the per-object allowance ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_allowance_lifts_private_but_never_link_local(settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False
    allowed = NotificationSubscription(
        name="internal",
        channel="webhook",
        url="http://[::ffff:10.0.0.1]/hook",
        secret="s" * 20,
        events=["tray_drained"],
        allow_private_address=True,
    )
    allowed.full_clean()  # an internal receiver, allowed for this webhook only
    allowed.url = "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/"
    with pytest.raises(ValidationError, match="No setting allows"):
        allowed.full_clean()


@pytest.mark.django_db
def test_config_target_urls_are_vetted_at_save():
    from integrations.models import ConfigTarget

    target = ConfigTarget(
        name="k8s",
        kind="kubernetes",
        settings={"api_url": "http://[2002:0a00:0001::]:6443", "insecure": True},
        allow_private_address=False,
    )
    with pytest.raises(ValidationError) as refused:
        target.full_clean()
    assert "api_url" in str(refused.value) and "private" in str(refused.value)
    target.allow_private_address = True  # an on-premises API server: the default
    target.full_clean()
    target.settings = {"api_url": "http://169.254.169.254/", "insecure": True}
    with pytest.raises(ValidationError, match="link-local"):
        target.full_clean()


@pytest.mark.django_db
def test_config_target_form_names_the_field(settings):
    from integrations.forms import ConfigTargetForm

    form = ConfigTargetForm(
        {
            "name": "slurm",
            "kind": "slurm",
            "config_dir": "/etc/slurm",
            "rest_url": "http://[::ffff:127.0.0.1]:6820",
            "rest_user": "slurm",
            "rest_token": "t",
        }
    )
    assert not form.is_valid()
    assert "loopback" in " ".join(form.errors["rest_url"])


@pytest.mark.django_db
def test_metrics_source_url_is_vetted_by_model_clean():
    from tenancy.models import MetricsSource

    source = MetricsSource(
        pk=1, kind="prometheus", url="http://[64:ff9b::a00:1]:9090", allow_private_address=False
    )
    with pytest.raises(ValidationError) as refused:
        source.full_clean()
    assert "private" in " ".join(refused.value.message_dict["url"])
    source.url = "http://[fe80::1]:9090"
    source.allow_private_address = True
    with pytest.raises(ValidationError, match="link-local"):
        source.full_clean()


# --- at connect time: a real server on 127.0.0.1 that must not be reached -----------------------------------


@contextmanager
def server(redirect_to: str | None = None):
    """A real HTTP server on 127.0.0.1: (port, paths it was asked for); /start redirects to redirect_to."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            hits.append(self.path)
            if redirect_to and self.path == "/start":
                self.send_response(302)
                self.send_header("Location", redirect_to)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_port, hits
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def internal_name(monkeypatch):
    """`internal.example` resolves to 127.0.0.1 (only the guard's resolver is replaced)."""
    real = outbound.resolve

    def resolve(host, port):
        return ["127.0.0.1"] if host == "internal.example" else real(host, port)

    monkeypatch.setattr(outbound, "resolve", resolve)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("address", ["127.0.0.1", "[::ffff:127.0.0.1]", "internal.example"])
def test_a_refused_address_is_never_connected_to(internal_name, address):
    with server() as (port, hits):
        with pytest.raises(OutboundRefused, match="loopback"):
            HttpClient().request("GET", f"http://{address}:{port}/x")
        assert hits == []
        # The same server, allowed for this client's own address: reached (the test is meaningful).
        assert HttpClient(allow_private=True).request("GET", f"http://127.0.0.1:{port}/x").status == 200
        assert hits == ["/x"]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_vetted_address_is_the_one_connected_to(monkeypatch):
    """One lookup: a name that resolves to a public address when checked and to 127.0.0.1 later (DNS
    rebinding) is connected to at the address the guard vetted, never at a second lookup's answer."""
    answers = iter([["192.0.2.10"], ["127.0.0.1"]])  # documentation address: refused; allowed below
    seen: list[str] = []

    def resolve(host, port):
        address = next(answers)
        seen.extend(address)
        return address

    monkeypatch.setattr(outbound, "resolve", resolve)
    with server() as (port, hits):
        with pytest.raises(ExternalError):
            HttpClient(allow_private=True, timeout=0.5).request("GET", f"http://rebind.example:{port}/x")
        assert seen == ["192.0.2.10"] and hits == []  # one resolution, and 127.0.0.1 was never asked


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_webhook_delivery_to_a_name_resolving_inside_is_refused(internal_name, settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False
    with server() as (port, hits):
        with pytest.raises(OutboundRefused):
            HttpClient(follow_redirects=False).request(
                "POST", f"http://internal.example:{port}/hook", {"a": 1}
            )
        assert hits == []


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_redirect_to_another_internal_host_does_not_share_the_allowance():
    with (
        server() as (inner_port, inner_hits),
        server(f"http://127.0.0.1:{inner_port}/secret") as (port, hits),
    ):
        client = HttpClient(f"http://127.0.0.1:{port}", allow_private=True)
        with pytest.raises(OutboundRefused, match="its own address only"):
            client.request("GET", "/start")
        assert hits == ["/start"] and inner_hits == []  # the other port (another service) got nothing


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_redirect_on_the_allowed_address_itself_is_followed():
    with server(redirect_to="/next") as (port, hits):
        client = HttpClient(f"http://127.0.0.1:{port}", allow_private=True)
        assert client.request("GET", "/start").status == 200
        assert hits == ["/start", "/next"]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_redirect_from_a_public_name_to_metadata_is_refused(monkeypatch):
    """The first hop is allowed (here: a name the test points at the local server, with the allowance for
    it); its redirect to the metadata address is refused before any connection."""
    monkeypatch.setattr(outbound, "resolve", lambda host, port: ["127.0.0.1"])
    with server(redirect_to="http://169.254.169.254/latest/meta-data/") as (port, hits):
        client = HttpClient(f"http://receiver.example:{port}", allow_private=True)
        with pytest.raises(OutboundRefused, match="link-local"):
            client.request("GET", "/start")
        assert hits == ["/start"]


# --- the property ------------------------------------------------------------------------------------------

PRIVATE_V4 = [
    ipaddress.ip_network(n)
    for n in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "100.64.0.0/10",
    )
]


def embeddings(v4: ipaddress.IPv4Address, prefix: int, subnet: int) -> list[ipaddress.IPv6Address]:
    n = int(v4)
    inverted = n ^ 0xFFFFFFFF
    return [
        ipaddress.IPv6Address((0xFFFF << 32) | n),  # IPv4-mapped
        ipaddress.IPv6Address(n),  # IPv4-compatible
        ipaddress.IPv6Address((0xFFFF << 48) | n),  # IPv4-translated
        ipaddress.IPv6Address((0x64FF9B << 96) | n),  # NAT64
        ipaddress.IPv6Address((0x0064FF9B0001 << 80) | n),  # local-use NAT64, /96 form
        ipaddress.IPv6Address((0x2002 << 112) | (n << 80) | (subnet << 64) | prefix),  # 6to4
        ipaddress.IPv6Address((0x20010000 << 96) | (0x4136E378 << 64) | (0x8000 << 48) | inverted),  # Teredo
        ipaddress.IPv6Address((0x24000CB0 << 96) | (subnet << 64) | (0x5EFE << 32) | n),  # ISATAP
        ipaddress.IPv6Address((0x24000CB0 << 96) | (subnet << 64) | (0x02005EFE << 32) | n),  # ISATAP (u)
    ]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@hypothesis_settings(max_examples=300, deadline=None)
@given(
    network=st.sampled_from(PRIVATE_V4),
    offset=st.integers(min_value=0, max_value=2**32),
    prefix=st.integers(min_value=0, max_value=2**64 - 1),
    subnet=st.integers(min_value=0, max_value=2**16 - 1),
)
def test_every_ipv6_embedding_of_a_private_ipv4_address_is_refused(network, offset, prefix, subnet):
    v4 = network[offset % network.num_addresses]
    assert address_problem(v4) is not None
    for v6 in embeddings(v4, prefix, subnet):
        assert address_problem(v6) is not None, f"{v6} carries {v4}"
        with pytest.raises(OutboundRefused):
            outbound.Guard().vet(str(v6), 80)
