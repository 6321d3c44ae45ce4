import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_runs_simulated_agents_against_a_real_server_and_reports_the_verdict():
    report = StringIO()
    call_command(
        "bench", "load", "--in-place", "--size", "200", "--workers", "1",
        "--agents", "1,3", "--seconds", "3", "--think", "0.2", "--target-ms", "60000", "--ingest", "20",
        stdout=report,
    )  # fmt: skip
    text = report.getvalue()
    steps = re.findall(r"^\s+(\d+) agents\s+([\d.]+) req/s.*errors (\d+)", text, re.MULTILINE)
    assert [int(agents) for agents, _, _ in steps] == [1, 3]
    assert all(float(rate) > 0 and errors == "0" for _, rate, errors in steps)
    assert re.search(r"turn p50/p95/p99 +[\d.]+/ *[\d.]+/ *[\d.]+ ms \(n=\d+\)", text)
    assert re.search(r"RSS master \d+ MB", text)
    assert "1 worker(s): holds 3 agents" in text
    assert re.search(r"ingest with embeddings: [\d,]+ turns/s", text)
    assert re.search(r"database size: [\d,]+ MB", text)


def test_it_refuses_unbounded_runs():
    for arguments in (["--agents", "1,100000"], ["--seconds", "3600"], ["--workers", "0"]):
        with pytest.raises(CommandError):
            call_command("bench", "load", *arguments)
