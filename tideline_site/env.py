"""Typed readers for environment variables.

Every setting Tideline reads comes through here so that a bad value stops the process at start-up
with a message naming the variable, instead of surfacing later as a confusing runtime error.
"""

import math
import os
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


# Past this no count, size or duration setting means anything, and dates, timedeltas and database
# integers computed from it overflow at run time instead of at start.
INT_SETTING_MAX = 10**9


def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int = INT_SETTING_MAX
) -> int:
    value = _raw(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from exc
    _check_range(name, number, minimum, maximum)
    return number


def env_float(
    name: str, default: float, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    value = _raw(name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from exc
    # nan passes every comparison and inf every open range: a timeout of either never fires.
    if not math.isfinite(number):
        raise ImproperlyConfigured(f"{name}={value!r} is not a finite number")
    _check_range(name, number, minimum, maximum)
    return number


def env_float_or_none(
    name: str, *, minimum: float | None = None, maximum: float | None = None
) -> float | None:
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
        try:
            threshold = float(number)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {item!r} is not name=number") from exc
        if not sep or not key.strip():
            raise ImproperlyConfigured(f"{name}: {item!r} is not name=number")
        _check_range(name, threshold, 0.0, 1.0)
        thresholds[key.strip()] = threshold
    return thresholds


def env_path(name: str, default: Path) -> Path:
    value = _raw(name)
    return (Path(value).expanduser() if value else default).resolve()


def _check_range(name: str, number: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum {minimum}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is above the maximum {maximum}")


def database_from_url(url: str, *, sqlite_options: dict, postgres_pool_size: int) -> dict:
    """Turn `sqlite:///abs/path.sqlite3` or `postgres://user:pw@host:port/name` into a DATABASES entry.

    `postgres_pool_size` connections at most are kept open per process (0: none, a new connection
    per request)."""
    parsed = urlparse(url)
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
            "PORT": str(parsed.port or ""),
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
