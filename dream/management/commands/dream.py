"""`manage.py dream [--layer …] [--dry-run]` runs DREAM; `manage.py dream scan [--json] [--since TS]`
prints the layer-0 report."""

import json
from datetime import date, datetime

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from dream.models import DreamLayer, DreamRunStatus
from dream.pipeline import dream_plan, dream_run
from dream.scanner import scan_markdown, scan_run
from memory.services.errors import TidelineError


def _since(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = parse_datetime(value)
        if parsed is None:
            day = parse_date(value)
            parsed = datetime(day.year, day.month, day.day) if day else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise CommandError(f"--since {value!r} is not a date or ISO date-time")
    return timezone.make_aware(parsed) if timezone.is_naive(parsed) else parsed


def _day(value: str | None) -> date | None:
    if not value:
        return None
    try:
        day = parse_date(value)
    except ValueError:
        day = None
    if day is None:
        raise CommandError(f"--day {value!r} is not a date (YYYY-MM-DD)")
    return day


class Command(BaseCommand):
    help = (
        "Run DREAM (layer 0 scan → script layer → solidify → combing → night drift → dream), "
        "or `dream scan` for the layer-0 report."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "action", nargs="?", choices=["scan"], help="`scan`: print the layer-0 report only"
        )
        parser.add_argument("--layer", default=DreamLayer.ALL, choices=DreamLayer.values)
        parser.add_argument(
            "--dry-run", action="store_true", help="show what would run; write nothing, no LLM"
        )
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.add_argument("--since", help="only turns at or after this date/time (ISO)")
        parser.add_argument("--day", help="the DREAM day (default today)")
        parser.add_argument(
            "--force", action="store_true", help="re-run LLM layers already done that day"
        )

    def handle(self, *args, action=None, **options) -> None:
        since = _since(options["since"])
        options["day"] = _day(options["day"])
        try:
            if action == "scan":
                self._scan(since=since, as_json=options["json"])
            elif options["dry_run"]:
                self._emit(dream_plan(layer=options["layer"], since=since), options["json"])
            else:
                self._run(options, since=since)
        except TidelineError as exc:
            raise CommandError(str(exc)) from exc

    def _scan(self, *, since, as_json: bool) -> None:
        report = scan_run(since=since)
        if as_json:
            self.stdout.write(json.dumps(report, ensure_ascii=False, indent=2))
        else:
            self.stdout.write(scan_markdown(report))

    def _emit(self, data: dict, as_json: bool) -> None:
        text = json.dumps(data, ensure_ascii=False, indent=2 if not as_json else None, default=str)
        self.stdout.write(text)

    def _run(self, options, *, since) -> None:
        quiet = options["json"]

        def progress(name: str, result: dict) -> None:
            if quiet:
                return
            reason = result.get("reason", "")
            written = {kind: len(ids) for kind, ids in (result.get("written") or {}).items()}
            line = f"  {name:<9} {result['status']:<8}"
            if written:
                line += " wrote " + ", ".join(f"{n} {kind}" for kind, n in written.items())
            if reason:
                line += f" ({reason})"
            self.stdout.write(line)

        if not quiet:
            self.stdout.write(f"DREAM {options['layer']} …")
        run = dream_run(
            layer=options["layer"],
            day=options["day"],
            since=since,
            force=options["force"],
            trigger="command",
            on_layer=progress,
        )
        if run.status == DreamRunStatus.SKIPPED:
            raise CommandError(f"another DREAM run is in progress; nothing was done ({run.error})")
        summary = {
            "run": run.pk,
            "status": run.status,
            "tokens": run.tokens,
            "error": run.error,
        }
        if quiet:
            self.stdout.write(json.dumps(summary | {"stats": run.stats}, ensure_ascii=False))
        else:
            self.stdout.write(
                f"run #{run.pk}: {run.status}, {run.tokens} tokens"
                + (f"\n{run.error}" if run.error else "")
            )
