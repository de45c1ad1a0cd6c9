from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from rest_framework.authtoken.models import Token

from core import tokens
from core.models import AuditSource
from inventory import agent_tokens
from inventory.models import Rack


class Command(BaseCommand):
    help = (
        "Issue an agent token for node agents (POST /api/v1/discovery/reports/ and /api/v1/telemetry/dcgm/), "
        "bound to one rack (--rack) or one host (--host), and print it; it is shown only this once. "
        "--fleet instead shows the global token of an account holding inventory.report_discovery (made, or "
        "replaced once expired), for an aggregator that reports for every host."
    )

    def add_arguments(self, parser):
        scope = parser.add_mutually_exclusive_group(required=True)
        scope.add_argument("--rack", help="the rack's name: the token may report for every tray of it")
        scope.add_argument("--host", help="a compute tray's hostname: the token may report for it only")
        scope.add_argument("--fleet", action="store_true", help="a token that may report for every host")
        parser.add_argument("--description", default="", help="what the token is for (shown on the page)")
        parser.add_argument("--username", default="node-agent", help="with --fleet: the account's name")

    def handle(self, *args, rack, host, fleet, description, username, **options):
        if fleet:
            return self._fleet(username)
        rack_row = None
        if rack is not None:
            rack_row = Rack.objects.filter(name=rack).first()
            if rack_row is None:
                raise CommandError(f"rack {rack!r} is not in the inventory")
        try:
            token, secret = agent_tokens.issue(rack=rack_row, hostname=host or "", description=description)
        except ValidationError as error:
            raise CommandError(" ".join(error.messages)) from error
        self.stdout.write(f"Agent token {token.prefix}… for {token.scope}: Authorization: Bearer {secret}")

    def _fleet(self, username):
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
            user.save()
        user.user_permissions.add(
            Permission.objects.get(codename="report_discovery", content_type__app_label="inventory")
        )
        token = Token.objects.filter(user=user).first()
        if token is None or tokens.is_expired(token):  # API tokens expire (core.tokens): a new one then
            token = tokens.rotate(user, AuditSource.COMMAND)
        self.stdout.write(f"Fleet agent {username} (every host): Authorization: Token {token.key}")
