"""`manage.py export [--scope S] [--without-embeddings] FILE`: the store, or one scope, as JSONL."""

import os
import sys

from django.core.management.base import BaseCommand, CommandError

from memory.models import ScopeKind
from memory.services.scopes import scope_resolve
from memory.services.transfer import store_export


class Command(BaseCommand):
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
        chosen = None
        if scope is not None:
            spec = scope.strip()
            if spec.startswith(("/", ".", "~")):
                path = os.path.abspath(os.path.expanduser(spec))
                chosen = scope_resolve(cwd=path, create=False)
            else:
                chosen = scope_resolve(explicit=spec, create=False)
            if chosen.kind == ScopeKind.GLOBAL and spec != ScopeKind.GLOBAL:
                raise CommandError(f"--scope {scope!r} names no scope in this store")
        if file == "-":
            report = store_export(out=sys.stdout, scope=chosen, embeddings=not without_embeddings)
        else:
            try:
                descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError as exc:
                raise CommandError(f"{file} exists; export never overwrites a file") from exc
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                report = store_export(out=out, scope=chosen, embeddings=not without_embeddings)
        rows = sum(report.counts.values())
        what = report.scope_label or "the whole store"
        self.stderr.write(f"exported {rows} rows of {what} to {file}")
