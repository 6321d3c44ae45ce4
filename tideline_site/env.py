"""Typed readers for environment variables.

Every setting Tideline reads comes through here so that a bad value stops the process at start-up
with a message naming the variable, instead of surfacing later as a confusing runtime error.
"""

import math
import os
import re
import stat
import zoneinfo
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    return None if value is None else value.strip()


def env_str(name: str, default: str) -> str:
    value = _raw(name)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no)")


# Upper bounds for durations. Every number setting states its own maximum (env_int and env_float
# require one): unbounded, a duration turned into a date or timedelta overflows at run time, on
# the first write or session start, instead of stopping the process here.
DAYS_MAX = 36_500  # 100 years: now ± this stays well inside datetime's years 1–9999
HOURS_MAX = DAYS_MAX * 24
# Seconds a request, a provider call or a lock wait may take: an hour. Far larger values overflow
# socket timeouts (time_t) and SQLite's busy timeout (a C int of milliseconds, about 24 days).
TIMEOUT_MAX = 3600
# For thresholds compared with a count of stored rows: past any store's size, i.e. "always".
ROWS_MAX = 10**9

# Plain ASCII numbers only: int() and float() also take "1_000" and other scripts' digits ("٣"),
# which no one means in a configuration file and which read differently in every other tool.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def env_int(name: str, default: int, *, minimum: int, maximum: int) -> int:
    value = _raw(name)
    if value is None or value == "":
        return default
    if not _INTEGER.fullmatch(value):
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer")
    try:
        number = int(value)
    except ValueError as exc:  # more digits than int() reads (sys.get_int_max_str_digits)
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from exc
    _check_range(name, number, minimum, maximum)
    return number


def _float_parse(name: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from exc
    # nan passes every comparison and inf every open range: a timeout of either never fires.
    if not math.isfinite(number):
        raise ImproperlyConfigured(f"{name}={value!r} is not a finite number")
    if not _DECIMAL.fullmatch(value):
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a plain number (ASCII digits, e.g. 0.5 or 1e-3)"
        )
    return number


def env_float(name: str, default: float, *, minimum: float, maximum: float) -> float:
    value = _raw(name)
    if value is None or value == "":
        return default
    number = _float_parse(name, value)
    _check_range(name, number, minimum, maximum)
    return number


def env_float_or_none(name: str, *, minimum: float, maximum: float) -> float | None:
    """A number when the variable is set, None when it is not (the caller's own default then
    applies, which may differ case by case)."""
    value = _raw(name)
    if value is None or value == "":
        return None
    return env_float(name, 0.0, minimum=minimum, maximum=maximum)


def env_choice(name: str, default: str, choices: Sequence[str]) -> str:
    value = env_str(name, default).lower()
    if value not in choices:
        shown = ", ".join(choice or "(unset)" for choice in choices)
        raise ImproperlyConfigured(f"{name}={value!r} must be one of: {shown}")
    return value


def env_time_zone(name: str, default: str) -> str:
    value = env_str(name, default)
    try:
        zoneinfo.ZoneInfo(value)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError) as exc:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a time zone (e.g. Europe/Madrid)"
        ) from exc
    return value


def env_list(name: str, default: Sequence[str]) -> list[str]:
    value = _raw(name)
    # Empty means "not set", as for every other setting (an empty host list refuses every request).
    if value is None or not value.strip():
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_thresholds(name: str, default: dict[str, float]) -> dict[str, float]:
    """Parse `name=0.93,other=0.9` into {"name": 0.93, "other": 0.9}, each value in [0, 1]."""
    value = _raw(name)
    if value is None or value == "":
        return dict(default)
    thresholds = {}
    for item in value.split(","):
        key, sep, number = item.partition("=")
        if not sep or not key.strip():
            raise ImproperlyConfigured(f"{name}: {item!r} is not name=number")
        # The same number rules as every other setting: a nan threshold passed the range check
        # and then matched nothing.
        threshold = _float_parse(f"{name}: {key.strip()}", number.strip())
        _check_range(name, threshold, 0.0, 1.0)
        thresholds[key.strip()] = threshold
    return thresholds


def env_path(name: str, default: Path) -> Path:
    value = _raw(name)
    return (Path(value).expanduser() if value else default).resolve()


def env_file(name: str, *, max_bytes: int) -> str:
    """The absolute path of an existing regular file of at most `max_bytes` when the variable is
    set, "" when it is not. A missing file was accepted silently (the feature was just off), and
    a FIFO or a device (/dev/zero) hung or filled memory at the first read."""
    value = _raw(name)
    if not value:
        return ""
    # Absolute so that every command reads the same file wherever it is started from; symlinks
    # are kept, so a repointed link is followed.
    path = os.path.abspath(Path(value).expanduser())
    try:
        status = os.stat(path)
    except OSError as exc:
        raise ImproperlyConfigured(
            f"{name}={value!r} cannot be used ({exc.strerror or type(exc).__name__})"
        ) from exc
    if not stat.S_ISREG(status.st_mode):
        raise ImproperlyConfigured(f"{name}={value!r} is not a regular file")
    if status.st_size > max_bytes:
        raise ImproperlyConfigured(
            f"{name}={value!r} is {status.st_size} bytes, above the maximum {max_bytes}"
        )
    if not os.access(path, os.R_OK):
        raise ImproperlyConfigured(f"{name}={value!r} cannot be read by this account")
    return path


def _check_range(name: str, number: float, minimum: float, maximum: float) -> None:
    if number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum {minimum}")
    if number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is above the maximum {maximum}")


# The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"


def _sqlite_file_check(url: str, path: str) -> None:
    """Refuse a path that SQLite cannot open as a database: a directory, a FIFO or device, or a
    file that is not a database. Unchecked, every command, `manage.py check` included, ended in
    Django's DatabaseError traceback (its model checks connect before Tideline's own check
    runs). A missing or empty file is fine: SQLite creates the database in it."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ImproperlyConfigured(
            f"TIDELINE_DATABASE_URL={url!r} cannot be used ({exc.strerror or type(exc).__name__})"
        ) from exc
    if stat.S_ISDIR(status.st_mode):
        raise ImproperlyConfigured(f"TIDELINE_DATABASE_URL={url!r} names a directory, not a file")
    if not stat.S_ISREG(status.st_mode):
        raise ImproperlyConfigured(f"TIDELINE_DATABASE_URL={url!r} is not a regular file")
    if status.st_size == 0:
        return
    try:
        with open(path, "rb") as database:
            header = database.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise ImproperlyConfigured(
            f"TIDELINE_DATABASE_URL={url!r} cannot be read ({exc.strerror or type(exc).__name__})"
        ) from exc
    if header != SQLITE_HEADER:
        raise ImproperlyConfigured(f"TIDELINE_DATABASE_URL={url!r} is not an SQLite database")


def database_from_url(url: str, *, sqlite_options: dict, postgres_pool_size: int) -> dict:
    """Turn `sqlite:///abs/path.sqlite3` or `postgres://user:pw@host:port/name` into a DATABASES entry.

    `postgres_pool_size` connections at most are kept open per process (0: none, a new connection
    per request)."""
    try:
        parsed = urlparse(url)
        port = parsed.port
    except ValueError as exc:
        # "Port out of range 0-65535", "Invalid IPv6 URL": urllib's reason, never the URL itself,
        # which may hold a password.
        raise ImproperlyConfigured(f"TIDELINE_DATABASE_URL is not a valid URL: {exc}") from exc
    if parsed.scheme == "sqlite":
        # sqlite:///abs and sqlite:////abs (an absolute path pasted after the three slashes) are
        # the same file.
        path = "/" + unquote(parsed.path).lstrip("/") if parsed.path.startswith("/") else ""
        if not path or path == "/":
            raise ImproperlyConfigured(f"TIDELINE_DATABASE_URL={url!r} names no SQLite file")
        # SQLite creates the file but not its directory; unchecked, the first query fails deep
        # inside Django with "unable to open database file".
        if not Path(path).parent.is_dir():
            raise ImproperlyConfigured(
                f"TIDELINE_DATABASE_URL={url!r}: the directory {Path(path).parent} does not exist"
            )
        _sqlite_file_check(url, path)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path,
            "OPTIONS": sqlite_options,
        }
    if parsed.scheme in {"postgres", "postgresql"}:
        options: dict = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
        if postgres_pool_size:
            # A new connection costs a backend start and cold catalog caches: measured in process
            # on a 10k store, per-turn injection p50 86-92 ms on a fresh connection per turn
            # against 51-68 ms on a reused one. The pool is bounded, so N workers hold at most
            # N x size of PostgreSQL's connections however many requests run at once; one that
            # finds the pool busy waits up to `timeout` seconds for a connection.
            options["pool"] = {"min_size": 1, "max_size": postgres_pool_size, "timeout": 30}
        return {
            # Django's backend plus the native search index's write path (see its module).
            "ENGINE": "tideline_site.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(port or ""),
            "OPTIONS": options,
            # The server is ASGI: each request runs in a thread of its own, so a persistent
            # connection is never reused, only left open until garbage collection (measured: 80
            # requests from 8 concurrent clients exhausted PostgreSQL's 100 connections).
            # Django closes at the end of every request; with the pool, closing returns the
            # connection to it (Django's pool requires CONN_MAX_AGE 0).
            "CONN_MAX_AGE": 0,
        }
    raise ImproperlyConfigured(
        f"TIDELINE_DATABASE_URL scheme {parsed.scheme!r} is not supported (use sqlite or postgres)"
    )
