"""`manage.py import_sessions PATH…`: import past agent sessions into the raw timeline."""

from django.core.management.base import CommandError

from injection.services.importing import FORMATS, files_collect, sessions_import
from memory.management.arguments import scope_named
from memory.management.progress import ProgressCommand
from memory.services.errors import TidelineError


class Command(ProgressCommand):
    help = (
        "Import Claude Code JSONL transcripts, Hermes session files or generic JSONL "
        "(session, role, content, ts). Each session lands in the scope of its own cwd; "
        "re-importing adds nothing. A file with a turn that cannot be stored is refused whole."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "paths", nargs="+", help="files or directories (searched for .jsonl/.json)"
        )
        parser.add_argument("--format", choices=("auto", *FORMATS), default="auto")
        parser.add_argument(
            "--scope",
            default="",
            help='put everything in this scope ("global", "workspace", "project:<path>", a scope '
            "id or label, or a directory)",
        )

    def handle(self, *args, paths, format, scope, **options) -> None:
        try:
            files = files_collect(paths)
        except TidelineError as exc:
            raise CommandError(str(exc)) from exc
        chosen = scope_named(scope, create=True) if scope else None
        totals = {"sessions": 0, "recorded": 0, "skipped": 0, "failed": 0}
        bar = self.progress(total=len(files), desc="importing", unit="file")
        for path in files:
            try:
                report = sessions_import(path=path, format=format, scope=chosen)
                totals["sessions"] += report.sessions
                totals["recorded"] += report.recorded
                totals["skipped"] += report.skipped
            except TidelineError as exc:
                totals["failed"] += 1
                bar.write(f"{path}: {exc}", file=self.stderr)
            bar.set_postfix(turns=totals["recorded"], refresh=False)
            bar.update()
        bar.close()
        summary = (
            f"{totals['sessions']} session(s): {totals['recorded']} turn(s) imported, "
            f"{totals['skipped']} already present, {totals['failed']} file(s) failed"
        )
        if files and totals["failed"] == len(files):
            raise CommandError(f"every file failed; nothing was imported ({summary})")
        self.stdout.write(summary)
