"""Numbers, times, queries and scope names a command cannot use are refused while its arguments
are parsed: a CommandError naming the option, never a traceback from deep inside a service."""

import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from memory.models import InboxItem, InboxStatus
from memory.services.errors import InvalidInput
from memory.services.inbox import inbox_capture, inbox_flush

HUGE = "99999999999999999999"


@pytest.mark.parametrize(
    "args",
    [
        ["by_scope", "global", "--limit", HUGE],
        ["by_scope", "global", "--limit", "0"],
        ["flush_inbox", "--limit", "-5"],
        ["flush_inbox", "--limit", HUGE],
        ["context", "--query", "x", "--cwd", "/", "--limit", HUGE],
    ],
)
def test_it_refuses_a_limit_out_of_bounds(db, global_scope, args):
    inbox_capture(content="I prefer helix as my editor", scope_id=global_scope.pk)
    with pytest.raises(CommandError, match=r"--limit: .* is not between 1 and"):
        call_command(*args, stdout=StringIO())
    assert InboxItem.objects.get().status == InboxStatus.PENDING


def test_it_refuses_a_flush_limit_below_one_in_the_service_too(db):
    with pytest.raises(InvalidInput, match="limit must be from 1"):
        inbox_flush(limit=-5)


@pytest.mark.parametrize(
    "args",
    [
        ["context", "--query", "x", "--cwd", "/", "--as-of", "2026-13-45T99:00"],
        ["context", "--query", "x", "--cwd", "/", "--as-of", "0001-01-01T00:00:00+23:59"],
        ["dream", "scan", "--since", "9999-12-31T23:59:59-23:59"],
        ["dream", "scan", "--since", "2026-02-30"],
    ],
)
def test_it_refuses_a_moment_it_cannot_read_or_compute_with(db, args):
    with pytest.raises(CommandError, match=r"--(as-of|since): '.*' is not"):
        call_command(*args, stdout=StringIO())


def test_it_reads_a_date_or_a_date_time_as_a_moment(db):
    for moment in ("2026-01-31", "2026-01-31T12:00:00Z"):
        out = StringIO()
        call_command("context", "--query", "x", "--cwd", "/", "--as-of", moment, stdout=out)
        assert "no memories match" in out.getvalue()


def test_it_refuses_a_query_longer_than_the_api_takes(db):
    began = time.monotonic()
    with pytest.raises(CommandError, match="--query: is 100000 characters long; at most 2000"):
        call_command("context", "--query", "a b " * 25_000, "--cwd", "/")
    assert time.monotonic() - began < 5


def test_it_refuses_an_unknown_scope_instead_of_reading_global(db, global_scope):
    with pytest.raises(CommandError, match="names no scope"):
        call_command("context", "--query", "postgres", "--scope", "bogus", stdout=StringIO())
    for spec in ("global", str(global_scope.pk), global_scope.label):
        out = StringIO()
        call_command("context", "--query", "postgres", "--scope", spec, stdout=out)
        assert out.getvalue().startswith(f"scope: [{global_scope.label}]")
