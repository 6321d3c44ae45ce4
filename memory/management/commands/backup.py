"""`manage.py backup FILE`: a consistent copy of the live SQLite store, while it keeps working."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from memory.services.errors import TidelineError
from memory.services.transfer import postgres_dump_command, store_backup


class Command(BaseCommand):
    help = (
        "Back the SQLite database up with SQLite's online backup API (a consistent snapshot, "
        "writers carry on). On PostgreSQL it prints the pg_dump command to use instead."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="the backup file to write (replaced atomically)")

    def handle(self, *args, file: str, **options) -> None:
        destination = Path(file)
        if connection.vendor == "postgresql":
            raise CommandError(
                "PostgreSQL is backed up with its own tools; nothing was written. Run:\n"
                f"  {postgres_dump_command(destination=destination)}\n"
                "and restore with pg_restore --dbname=<empty database> "
                f"{destination} (or move one scope with `manage.py export --scope`)."
            )
        try:
            size = store_backup(destination=destination)
        except TidelineError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"backed up {connection.settings_dict['NAME']} to {file} ({size} bytes)")
