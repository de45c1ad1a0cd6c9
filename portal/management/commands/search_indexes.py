"""`manage.py search_indexes`: make the global search's trigram indexes on PostgreSQL when migration portal
0003 could not (its role could not create the pg_trgm extension). Idempotent: what exists is kept; builds
CONCURRENTLY (writes go on). Exits non-zero, saying what to run, while the extension is missing. Nothing to
do on SQLite."""

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from portal.pages import search_indexes


class Command(BaseCommand):
    help = "Create the search's pg_trgm extension (when the role may) and its trigram indexes (PostgreSQL)."

    def handle(self, *args, **options):
        if connection.vendor != "postgresql":
            self.stdout.write(f"Nothing to do on {connection.vendor}: search scans there.")
            return
        reason = search_indexes.create_extension(connection)
        if reason is not None:
            raise CommandError(search_indexes.missing_extension_message(connection, reason))
        made = search_indexes.create_indexes(connection, concurrently=True)
        self.stdout.write(
            f"Made {', '.join(made)}." if made else f"All {len(search_indexes.INDEXES)} search indexes exist."
        )
