"""`manage.py import_store FILE`: load a `manage.py export` file into this (fresh) database."""

from pathlib import Path

from django.core.management.base import CommandError

from memory.management.progress import ProgressCommand
from memory.services.errors import TidelineError
from memory.services.transfer import store_import


class Command(ProgressCommand):
    help = (
        "Load an export into this database in one transaction. Ids are kept, so the target must "
        "not hold rows with the same ids (a fresh, migrated database); scopes are matched by kind "
        "and key. Rows exported without vectors wait for the embedding sweep or `reembed`."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="a file written by `manage.py export`")

    def handle(self, *args, file: str, **options) -> None:
        path = Path(file)
        if not path.is_file():
            raise CommandError(f"{file} is not a file")
        try:
            report = store_import(path=path, progress=self.progress_steps())
        except TidelineError as exc:
            raise CommandError(str(exc)) from exc
        for label, count in sorted(report.counts.items()):
            self.stdout.write(f"  {label}: {count}")
        self.stdout.write(f"imported {sum(report.counts.values())} rows from {file}")
        if not report.embeddings:
            self.stdout.write(
                "vectors were not exported: the embedding sweep (or reembed) adds them"
            )
