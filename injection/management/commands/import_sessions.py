"""`manage.py import_sessions PATH…`: import past agent sessions into the raw timeline."""

from django.core.management.base import CommandError

from injection.services.importing import (
    FORMATS,
    PARSERS,
    files_collect,
    format_guess,
    session_import,
)
from memory.management.progress import ProgressCommand
from memory.services.errors import TidelineError


class Command(ProgressCommand):
    help = (
        "Import Claude Code JSONL transcripts, Hermes session files or generic JSONL "
        "(session, role, content, ts). Each session lands in the scope of its own cwd; "
        "re-importing adds nothing."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "paths", nargs="+", help="files or directories (searched for .jsonl/.json)"
        )
        parser.add_argument("--format", choices=("auto", *FORMATS), default="auto")
        parser.add_argument(
            "--scope", default="", help='put everything in this scope ("project:<path>", …)'
        )

    def handle(self, *args, paths, format, scope, **options) -> None:
        try:
            files = files_collect(paths)
        except TidelineError as exc:
            raise CommandError(str(exc)) from exc
        totals = {"sessions": 0, "recorded": 0, "skipped": 0, "failed": 0}
        bar = self.progress(total=len(files), desc="importing", unit="file")
        for path in files:
            kind = format_guess(path) if format == "auto" else format
            try:
                for parsed in PARSERS[kind](path):
                    result = session_import(parsed=parsed, source=str(path), scope_override=scope)
                    totals["sessions"] += 1
                    totals["recorded"] += len(result.recorded)
                    totals["skipped"] += result.skipped
            except (TidelineError, OSError, ValueError) as exc:
                totals["failed"] += 1
                bar.write(f"{path}: {exc}", file=self.stderr)
            bar.set_postfix(turns=totals["recorded"], refresh=False)
            bar.update()
        bar.close()
        self.stdout.write(
            f"{totals['sessions']} session(s): {totals['recorded']} turn(s) imported, "
            f"{totals['skipped']} already present, {totals['failed']} file(s) failed"
        )
