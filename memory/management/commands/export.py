"""`manage.py export [--scope S] [--without-embeddings] FILE`: the store, or one scope, as JSONL."""

import os
import sys

from django.core.management.base import CommandError

from memory.management.arguments import scope_named
from memory.management.progress import ProgressCommand
from memory.services.transfer import TransferReport, store_export


class Command(ProgressCommand):
    help = (
        "Write the whole store (or one scope) as JSON Lines: every status, evidence, audit, "
        "DREAM records, and vectors unless --without-embeddings. The file holds secret memories "
        "and key hashes, so it is created owner-readable only. '-' writes to stdout."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="where to write the export ('-' for stdout)")
        parser.add_argument(
            "--scope",
            help='"global", "workspace", "project:<git remote or path>", a scope id or label, or a '
            "directory (its project)",
        )
        parser.add_argument(
            "--without-embeddings",
            action="store_true",
            help="leave vectors out (smaller; the target re-embeds them)",
        )

    def handle(self, *args, file: str, scope: str | None, without_embeddings: bool, **options):
        chosen = None if scope is None else scope_named(scope, create=False)

        def write(out) -> TransferReport:
            return store_export(
                out=out,
                scope=chosen,
                embeddings=not without_embeddings,
                progress=self.progress_steps(),
            )

        if file == "-":
            report = write(sys.stdout)
        else:
            try:
                descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError as exc:
                if os.path.isdir(file):
                    raise CommandError(f"{file} is a directory; name the file to write") from exc
                raise CommandError(f"{file} exists; export never overwrites a file") from exc
            except OSError as exc:
                raise CommandError(f"cannot write {file!r}: {exc.strerror or exc}") from exc
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                report = write(out)
        rows = sum(report.counts.values())
        what = report.scope_label or "the whole store"
        self.stderr.write(f"exported {rows} rows of {what} to {file}")
