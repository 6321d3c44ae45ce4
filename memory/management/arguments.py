"""What the management commands' arguments may be, checked once for every command: a bad value is
refused as a CommandError naming it, before the command reads or writes anything."""

import argparse
import os
from collections.abc import Callable
from datetime import datetime, time

from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from memory.models import Scope, ScopeKind
from memory.services.bounds import MOMENT_EARLIEST, MOMENT_LATEST, moment_storable
from memory.services.scopes import scope_resolve

# A query as long as the REST API's and MCP's search takes (injection/operations/fields.py):
# matching costs grow with the query, so the command line is held to the same bound.
QUERY_MAX_CHARS = 2000
# Row counts a command may be asked for: far past any store, well inside a 64-bit SQL integer.
LIMIT_MAX = 1_000_000


def bounded_int(*, low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value

    return parse


def bounded_text(*, max_chars: int) -> Callable[[str], str]:
    """An argparse type: a text of 1 to `max_chars` characters."""

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError("must not be empty")
        if len(text) > max_chars:
            raise argparse.ArgumentTypeError(
                f"is {len(text)} characters long; at most {max_chars} are taken"
            )
        return text

    return parse


def moment(text: str) -> datetime:
    """An argparse type: an ISO date-time, or a date (its midnight), in the configured time zone
    when it names none, and one the store can compute with (search and DREAM shift it by zones
    and days, which overflows at datetime's ends)."""
    try:
        parsed = parse_datetime(text)
        if parsed is None:
            day = parse_date(text)
            parsed = datetime.combine(day, time()) if day else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO date or date-time (2026-01-31 or 2026-01-31T12:00:00Z)"
        )
    aware = parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed)
    if not moment_storable(aware):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not between {MOMENT_EARLIEST.date()} and {MOMENT_LATEST.date()}"
        )
    return aware


def scope_named(spec: str, *, create: bool) -> Scope:
    """The scope `spec` names: "global", "workspace", "project:<git remote or path>", a scope id
    or label, or a directory (its project). Scope resolution falls back to global for anything
    it does not know, so only a spec that names global itself (by name, id or label) may end
    there: a typo must never put rows in, or read them from, the scope every project sees."""
    text = spec.strip()
    if text.startswith(("/", ".", "~")):
        scope = scope_resolve(cwd=os.path.abspath(os.path.expanduser(text)), create=create)
    else:
        scope = scope_resolve(explicit=text, create=create)
    if scope.kind == ScopeKind.GLOBAL and text not in (
        ScopeKind.GLOBAL,
        str(scope.pk),
        scope.label,
    ):
        raise CommandError(f"--scope {spec!r} names no scope in this store")
    return scope
