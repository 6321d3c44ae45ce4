"""`manage.py flush_inbox [--llm]`: turn captured utterances into memories, each item once."""

from django.core.management.base import BaseCommand, CommandError

from memory.management.arguments import LIMIT_MAX, bounded_int
from memory.services.errors import TidelineError
from memory.services.inbox import inbox_flush


class Command(BaseCommand):
    help = "Extract memory candidates from the inbox (rules; --llm to ask the configured LLM) and run them through the gate and consolidation."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--llm", action="store_true", help="extract with the LLM (falls back to the rules)"
        )
        parser.add_argument(
            "--limit",
            type=bounded_int(low=1, high=LIMIT_MAX),
            default=None,
            help="process at most N items",
        )

    def handle(self, *args, llm: bool, limit: int | None, **options) -> None:
        def progress(position, total, item, result) -> None:
            decisions = ", ".join(result["decisions"]) or "nothing to keep"
            self.stdout.write(f"[{position}/{total}] inbox #{item.pk}: {decisions}")

        try:
            report = inbox_flush(use_llm=llm, limit=limit, progress=progress)
        except TidelineError as exc:
            raise CommandError(str(exc)) from exc
        decisions = ", ".join(
            f"{name}: {count}" for name, count in sorted(report.decisions.items())
        )
        self.stdout.write(
            f"processed {report.processed}, skipped {report.skipped}"
            + (f"; decisions {decisions}" if decisions else "")
            + (
                f"; LLM fell back to rules {report.llm_fallbacks} time(s)"
                if report.llm_fallbacks
                else ""
            )
        )
        for error in report.errors:
            self.stderr.write(f"candidate refused: {error}")
