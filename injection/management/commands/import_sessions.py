"""`manage.py import_sessions PATH…`: import past agent sessions into the raw timeline."""

from django.core.management.base import CommandError

from injection.services.importing import FORMATS, files_collect, sessions_import
from memory.management.arguments import scope_named
from memory.management.progress import ProgressCommand
from memory.services.errors import TidelineError


class Command(ProgressCommand):
    help = (
        "Import Claude Code JSONL transcripts, Hermes session files or generic JSONL "
        "(session, role, content, ts). Each session lands in the scope of its own cwd ('~' is "
        "your home; a session whose cwd is no absolute path is left out and reported); "
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
        totals = {"sessions": 0, "recorded": 0, "skipped": 0, "refused": 0, "failed": 0}
        # One bar of turns over every file: each file's turns are counted once it is read.
        bar = self.progress(total=0, desc="importing", unit="turn")
        file_done = 0

        def advance(_name: str, done: int, total: int) -> None:
            nonlocal file_done
            if not file_done:
                bar.total += total
            bar.update(done - file_done)
            file_done = done

        for number, path in enumerate(files, start=1):
            file_done = 0
            try:
                report = sessions_import(path=path, format=format, scope=chosen, progress=advance)
                totals["sessions"] += report.sessions
                totals["recorded"] += report.recorded
                totals["skipped"] += report.skipped
                totals["refused"] += len(report.refused)
                for reason in report.refused:
                    bar.write(f"{path}: {reason}", file=self.stderr)
            except TidelineError as exc:
                totals["failed"] += 1
                bar.write(f"{path}: {exc}", file=self.stderr)
            bar.set_postfix(files=f"{number}/{len(files)}", imported=totals["recorded"])
        bar.close()
        summary = (
            f"{totals['sessions']} session(s): {totals['recorded']} turn(s) imported, "
            f"{totals['skipped']} already present, {totals['failed']} file(s) failed, "
            f"{totals['refused']} session(s) refused"
        )
        if files and totals["failed"] == len(files):
            raise CommandError(f"every file failed; nothing was imported ({summary})")
        self.stdout.write(summary)
