"""Settings that used to pass start-up and then fail at run time (a date overflow on the first fact
write, a 41-million-entry list at session start, a traceback on every command) or that were read
leniently: each now stops `manage.py` at once with one `tideline: …` line naming the variable."""

import os
import sqlite3
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from injection.services.context import context_session_start, t2b_windows
from memory.services.facts import FactInput, fact_write
from memory.services.maintenance import lifecycle_plan
from memory.services.scopes import scope_visible_ids
from memory.services.weights import decay_limit_days
from tests.site.test_checks import manage
from tideline_site.env import (
    DAYS_MAX,
    HOURS_MAX,
    database_from_url,
    env_file,
    env_float,
    env_int,
    env_thresholds,
)


def assert_refused_in_one_line(result, *expected: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tideline: "), result.stderr
    for text in expected:
        assert text in lines[0]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        # Each passed start-up before; the first overflowed `date` on every project fact write,
        # the next two on maintenance, the timeouts a socket's time_t or SQLite's int busy timeout.
        ("TIDELINE_TTL_PROJECT_FACT_DAYS", "3000000"),
        ("TIDELINE_DECAY_DAYS_HIGH", "36501"),
        ("TIDELINE_EMOTION_DECAY_FACTOR", "100000"),
        ("TIDELINE_T2B_MAX_HOURS", "1000000000"),
        ("TIDELINE_LLM_TIMEOUT", "1e10"),
        ("TIDELINE_SQLITE_BUSY_TIMEOUT", "1000000000"),
        ("TIDELINE_SEARCH_PRIOR_WEIGHT", "1e300"),
        ("TIDELINE_BEAT_DREAM_EXPIRES", "999999999"),
    ],
)
def test_it_stops_at_start_on_a_number_past_its_maximum(tmp_path, variable, value):
    result = manage("check", **{variable: value}, TIDELINE_DATA_DIR=str(tmp_path))

    assert_refused_in_one_line(result, variable, "above the maximum")


def test_it_stops_at_start_on_more_t2b_windows_than_a_session_start_should_query(tmp_path):
    """Windows grow FIRST hours at a time; each is a query at session start in a quiet scope."""
    result = manage(
        "check",
        TIDELINE_T2B_FIRST_HOURS="1",
        TIDELINE_T2B_MAX_HOURS=str(django_settings.T2B_WINDOWS_MAX + 1),
        TIDELINE_DATA_DIR=str(tmp_path),
    )

    assert_refused_in_one_line(result, "TIDELINE_T2B_MAX_HOURS", "TIDELINE_T2B_FIRST_HOURS")


@pytest.mark.django_db
def test_it_writes_facts_starts_sessions_and_plans_decay_at_every_maximum(settings, project_scope):
    """The bounds themselves keep the arithmetic in range (p5_settings_overflow at the edge)."""
    settings.TIDELINE_TTL_PROJECT_FACT_DAYS = DAYS_MAX
    settings.TIDELINE_T2_DAYS = DAYS_MAX
    settings.TIDELINE_DECAY_DAYS_LOW = settings.TIDELINE_DECAY_DAYS_MID = DAYS_MAX
    settings.TIDELINE_DECAY_DAYS_HIGH = DAYS_MAX
    settings.TIDELINE_EMOTION_DECAY_FACTOR = 10.0
    settings.TIDELINE_T2B_FIRST_HOURS = HOURS_MAX // settings.T2B_WINDOWS_MAX
    settings.TIDELINE_T2B_MAX_HOURS = HOURS_MAX

    fact = fact_write(
        data=FactInput(
            scope_id=project_scope.pk,
            profile_name="parser module",
            profile_kind="project",
            kind="fact",
            predicate="grammar_kind",
            value="PEG grammar with packrat caching",
        )
    )
    context_session_start(scope_ids=scope_visible_ids(scope=project_scope))
    lifecycle_plan()

    assert fact.expires_at > timezone.now() + timedelta(days=DAYS_MAX - 1)
    assert len(t2b_windows()) == settings.T2B_WINDOWS_MAX
    longest = decay_limit_days(base_days=DAYS_MAX, emotion_intensity=10)
    assert (timezone.now() - timedelta(days=longest)).year > 1


@pytest.mark.parametrize("value", ["1_000", "٣", "١٠"])
def test_it_reads_only_plain_ascii_integers(monkeypatch, value):
    """int() takes "1_000" and other scripts' digits; a configuration value means neither."""
    monkeypatch.setenv("TIDELINE_T2_TOP", value)

    with pytest.raises(ImproperlyConfigured, match=r"TIDELINE_T2_TOP.*is not an integer"):
        env_int("TIDELINE_T2_TOP", 3, minimum=0, maximum=1000)


@pytest.mark.parametrize("value", ["1_0.5", "١.5", "1e1_0"])
def test_it_reads_only_plain_ascii_decimals(monkeypatch, value):
    monkeypatch.setenv("TIDELINE_BODY_TIMEOUT", value)

    with pytest.raises(ImproperlyConfigured, match=r"TIDELINE_BODY_TIMEOUT.*not a"):
        env_float("TIDELINE_BODY_TIMEOUT", 10.0, minimum=0.5, maximum=3600)


def test_it_still_reads_signed_decimal_and_exponent_numbers(monkeypatch):
    for value, number in [("+5", 5), ("-0", 0), (" 7 ", 7)]:
        monkeypatch.setenv("TIDELINE_T2_TOP", value)
        assert env_int("TIDELINE_T2_TOP", 3, minimum=-1, maximum=10) == number
    for value, number in [("1e-3", 0.001), (".5", 0.5), ("5.", 5.0), ("-2.5E+1", -25.0)]:
        monkeypatch.setenv("TIDELINE_SEARCH_PRIOR_WEIGHT", value)
        assert env_float("TIDELINE_SEARCH_PRIOR_WEIGHT", 0.1, minimum=-100, maximum=10) == number


@pytest.mark.parametrize("value", ["usem3=nan", "usem3=.9_5", "usem3=٠.٩"])
def test_it_reads_merge_thresholds_as_plain_finite_numbers(monkeypatch, value):
    """A nan threshold passed the 0–1 range check and then matched nothing."""
    monkeypatch.setenv("TIDELINE_MERGE_THRESHOLDS", value)

    with pytest.raises(ImproperlyConfigured, match="TIDELINE_MERGE_THRESHOLDS"):
        env_thresholds("TIDELINE_MERGE_THRESHOLDS", {})


@pytest.mark.parametrize(
    ("variable", "value"),
    [("TIDELINE_HSTS_SECONDS", "a year"), ("TIDELINE_HSTS_PRELOAD", "maybe")],
)
def test_it_checks_hsts_settings_while_secure_mode_is_off(tmp_path, variable, value):
    """Before, they were read only under TIDELINE_SECURE=1: a typo waited for the day HTTPS was
    switched on."""
    result = manage("check", **{variable: value}, TIDELINE_DATA_DIR=str(tmp_path))

    assert_refused_in_one_line(result, variable)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("missing", "No such file or directory"),
        ("directory", "not a regular file"),
        ("fifo", "not a regular file"),
        ("device", "not a regular file"),
        ("huge", "above the maximum"),
    ],
)
def test_it_refuses_a_soul_file_that_session_start_could_not_read(tmp_path, kind, expected):
    """Before, a missing file was accepted silently, and a FIFO or /dev/zero hung or filled memory
    at the first session start."""
    path = tmp_path / "SOUL.md"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path = "/dev/zero"
    elif kind == "huge":
        path.write_bytes(b"x" * 1_000_001)

    result = manage("check", TIDELINE_SOUL_FILE=str(path), TIDELINE_DATA_DIR=str(tmp_path))

    assert_refused_in_one_line(result, "TIDELINE_SOUL_FILE", expected)


def test_it_resolves_a_relative_soul_file_once_at_start(monkeypatch, tmp_path):
    """Every command then reads the same file, wherever it was started from."""
    (tmp_path / "SOUL.md").write_text("I am Tide.", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIDELINE_SOUL_FILE", "SOUL.md")

    assert env_file("TIDELINE_SOUL_FILE", max_bytes=100) == str(tmp_path / "SOUL.md")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgres://tide:secretpw@127.0.0.1:99999/x", "Port out of range"),
        ("postgres://tide:secretpw@[::1/x", "Invalid IPv6 URL"),
        ("postgres://tide:secretpw@db:port/x", "Port could not be cast"),
    ],
)
def test_it_refuses_a_database_url_that_does_not_parse_without_showing_it(tmp_path, url, reason):
    result = manage("check", TIDELINE_DATABASE_URL=url, TIDELINE_DATA_DIR=str(tmp_path))

    assert_refused_in_one_line(result, "TIDELINE_DATABASE_URL", reason)
    assert "secretpw" not in result.stderr


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("text", "is not an SQLite database"),
        ("directory", "names a directory"),
        ("fifo", "is not a regular file"),
    ],
)
def test_it_refuses_a_sqlite_path_that_is_not_a_database(tmp_path, kind, expected):
    """Before, `check --database default` and every command ended in Django's DatabaseError or
    OperationalError traceback (its model checks connect before Tideline's own check runs)."""
    path = tmp_path / "tideline.sqlite3"
    if kind == "text":
        path.write_text("not a db\n")
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)

    result = manage(
        "check",
        "--database",
        "default",
        TIDELINE_DATABASE_URL=f"sqlite:///{path}",
        TIDELINE_DATA_DIR=str(tmp_path),
    )

    assert_refused_in_one_line(result, "TIDELINE_DATABASE_URL", expected)


def test_it_opens_a_sqlite_database_a_new_file_or_an_empty_one(tmp_path):
    """What SQLite itself accepts stays accepted: a database, an empty file, no file yet."""
    real, empty = tmp_path / "real.sqlite3", tmp_path / "empty.sqlite3"
    sqlite3.connect(real).execute("CREATE TABLE t (x)").connection.close()
    empty.touch()

    for path in (real, empty, tmp_path / "new.sqlite3"):
        database = database_from_url(f"sqlite:///{path}", sqlite_options={}, postgres_pool_size=0)
        assert database["NAME"] == str(path)
    with pytest.raises(ImproperlyConfigured, match="names a directory"):
        database_from_url(f"sqlite:///{tmp_path}", sqlite_options={}, postgres_pool_size=0)
