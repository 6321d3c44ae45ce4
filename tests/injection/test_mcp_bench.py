"""`manage.py bench mcp` times real MCP start-ups on a scratch store and prints each figure."""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

pytestmark = pytest.mark.slow


def test_it_times_stdio_and_http_start_ups_on_a_scratch_store(db):
    report = StringIO()
    call_command("bench", "mcp", "--stdio-runs", "1", "--http-runs", "1", stdout=report)
    text = report.getvalue()
    for label in ("initialise", "first call", "listening"):
        figure = re.search(rf"{label}\s+median\s+(\d+) ms", text)
        assert figure and int(figure.group(1)) > 0, text


def test_it_refuses_a_run_count_below_one(db):
    with pytest.raises(CommandError, match="stdio-runs"):
        call_command("bench", "mcp", "--stdio-runs", "0")
