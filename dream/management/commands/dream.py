"""`manage.py dream [--layer …] [--dry-run]` runs DREAM; `manage.py dream scan [--json] [--since TS]`
prints the layer-0 report."""

import json
import time
from datetime import date

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date

from dream.models import DreamLayer, DreamRunStatus
from dream.pipeline import dream_day_ended, dream_layers, dream_plan, dream_run
from dream.scanner import scan_markdown, scan_run
from memory.admin.display import dream_layer_rows
from memory.management.arguments import moment
from memory.services.errors import TidelineError


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
        parser.add_argument(
            "--since", type=moment, help="only turns at or after this date/time (ISO)"
        )
        # The command is the nightly run from cron as much as beat is, so it covers the same day.
        # With today as the default (as before), a 03:30 cron job combed and dreamt the hours
        # since midnight and never the day that ended.
        parser.add_argument(
            "--day",
            help="the DREAM day, YYYY-MM-DD (default: yesterday, the day that just ended; give "
            "today's date to dream about today so far; the nightly run then reads what was "
            "recorded since)",
        )
        parser.add_argument(
            "--force", action="store_true", help="re-run LLM layers already done that day"
        )

    def handle(self, *args, action=None, **options) -> None:
        since = options["since"]
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
        order = dream_layers(options["layer"])
        started: dict[str, float] = {}

        def layer_start(name: str) -> None:
            started[name] = time.monotonic()
            if not quiet:
                self.stdout.write(f"[{order.index(name) + 1}/{len(order)}] {name} …")

        def layer_done(name: str, result: dict) -> None:
            if quiet:
                return
            seconds = time.monotonic() - started.get(name, time.monotonic())
            row = dream_layer_rows({"layers": {name: result}, "order": [name]})[0]
            line = f"      {name:<9} {row['status']:<8} {seconds:5.1f} s"
            if row["read"]:
                line += f"  {row['read']}"
            if row["note"]:
                line += f"  ({row['note']})"
            self.stdout.write(line)
            for error in row["errors"]:
                self.stdout.write(f"      ! {error}")

        if not quiet:
            self.stdout.write(f"DREAM {options['layer']}: {len(order)} layer(s)")
        began = time.monotonic()
        run = dream_run(
            layer=options["layer"],
            day=options["day"] or dream_day_ended(),
            since=since,
            force=options["force"],
            trigger="command",
            on_layer=layer_done,
            on_layer_start=layer_start,
        )
        if run.status == DreamRunStatus.SKIPPED:
            raise CommandError(f"another DREAM run is in progress; nothing was done ({run.error})")
        if quiet:
            summary = {
                "run": run.pk,
                "status": run.status,
                "tokens": run.tokens,
                "error": run.error,
            }
            self.stdout.write(json.dumps(summary | {"stats": run.stats}, ensure_ascii=False))
            return
        self.stdout.write(_summary(run, seconds=time.monotonic() - began))


def _summary(run, *, seconds: float) -> str:
    """One paragraph: how the run ended, what it wrote in all, what was skipped or failed."""
    rows = dream_layer_rows(run.stats)
    written: dict[str, int] = {}
    for row in rows:
        for group in row["written"]:
            written[group["kind"]] = written.get(group["kind"], 0) + len(group["links"])
    by_status: dict[str, list[str]] = {}
    for row in rows:
        by_status.setdefault(row["status"], []).append(row["layer"])
    lines = [f"run #{run.pk}: {run.status} in {seconds:.1f} s, {run.tokens} tokens"]
    lines.append(
        "  wrote "
        # Memories only: what the script layer derives (clusters, the graph) is on its own line.
        + (", ".join(f"{count} {kind}" for kind, count in written.items()) or "no new memories")
    )
    lines.append(
        "  layers: "
        + "; ".join(f"{status} {', '.join(names)}" for status, names in by_status.items())
    )
    if run.error:
        lines.append(f"  errors:\n{run.error}")
    return "\n".join(lines)
