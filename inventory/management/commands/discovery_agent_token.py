from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Create (or show) the API token node agents use to POST /api/v1/discovery/reports/."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="node-agent")

    def handle(self, *args, username, **options):
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
            user.save()
        user.user_permissions.add(
            Permission.objects.get(codename="report_discovery", content_type__app_label="inventory")
        )
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(f"Discovery agent {username}: Authorization: Token {token.key}")
