"""System checks for every setting that would otherwise fail at first use.

`manage.py check` (and `./tideline up`, which runs it before serving) stops on an error with a
message naming the setting, instead of a server that starts and then answers 500 to every request.
"""

import ipaddress
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections

from memory.services.errors import InvalidInput
from memory.services.http_client import endpoint_url_validate
from memory.services.llm import LLMConfigInvalid, llm_config_read
from tideline_site.edge import trusted_proxies
from tideline_site.private_files import private_paths_too_open, sqlite_files

BROKER_SCHEMES = {"redis", "rediss", "amqp", "amqps", "pyamqp", "sqs", "memory", "filesystem"}


@register()
def embedder_check(app_configs, **kwargs) -> list:
    provider = settings.TIDELINE_EMBEDDER
    if provider not in {"openai", "embed_batch"}:
        return []
    hint = "set TIDELINE_EMBEDDER_URL, or TIDELINE_EMBEDDER=bundled (or none)"
    if not settings.TIDELINE_EMBEDDER_URL:
        return [
            Error(
                f"TIDELINE_EMBEDDER={provider} needs TIDELINE_EMBEDDER_URL",
                hint=hint,
                id="tideline.E001",
            )
        ]
    errors = []
    try:
        endpoint_url_validate(settings.TIDELINE_EMBEDDER_URL, what="TIDELINE_EMBEDDER_URL")
    except InvalidInput as exc:
        errors.append(Error(str(exc), hint=hint, id="tideline.E001"))
    if provider == "openai" and not settings.TIDELINE_EMBEDDER_MODEL:
        errors.append(
            Error(
                "TIDELINE_EMBEDDER=openai needs TIDELINE_EMBEDDER_MODEL",
                hint="the model name the endpoint expects, e.g. text-embedding-3-small",
                id="tideline.E001",
            )
        )
    return errors


# Tagged "database": Django runs it for `check --database default` and `migrate`, not on every
# import of the project (a Celery worker's start-up, a test run without database access).
@register(Tags.database)
def database_check(app_configs, databases=None, **kwargs) -> list:
    if not databases or "default" not in databases:
        return []
    connection = connections["default"]
    try:
        if connection.settings_dict["OPTIONS"].get("pool"):
            # A pool retries a failing connect until its 30 s timeout, then says only that it
            # timed out; one direct connect fails at once with the driver's reason.
            connection.Database.connect(**connection.get_connection_params()).close()
        else:
            connection.ensure_connection()
    except (DatabaseError, connection.Database.Error, OSError) as exc:
        # The driver's message names the host and database, never the password.
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [
            Error(
                f"the database cannot be opened: {reason}",
                hint="check TIDELINE_DATABASE_URL (and that the database exists and runs)",
                id="tideline.E002",
            )
        ]
    return []


@register()
def data_dir_check(app_configs, **kwargs) -> list:
    directory = Path(settings.DATA_DIR)
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-check-"):
            pass
    except OSError as exc:
        return [
            Error(
                f"the data dir {directory} is not writable ({exc.strerror or type(exc).__name__})",
                hint="fix its owner and permissions, or point TIDELINE_DATA_DIR elsewhere",
                id="tideline.E003",
            )
        ]
    return []


@register()
def broker_check(app_configs, **kwargs) -> list:
    url = settings.CELERY_BROKER_URL
    if not url:
        return []
    problem = ""
    try:
        parsed = urlsplit(url)
        parsed.port  # noqa: B018 — a malformed port raises here
    except ValueError:
        problem = "is not a URL"
    else:
        if parsed.scheme not in BROKER_SCHEMES:
            problem = f"has the scheme {parsed.scheme or '(none)'!r}"
        elif (
            parsed.scheme in {"redis", "rediss", "amqp", "amqps", "pyamqp"} and not parsed.hostname
        ):
            problem = "names no host"
    if not problem:
        return []
    return [
        Error(
            f"CELERY_BROKER_URL {problem}",
            hint="e.g. redis://127.0.0.1:6379/0, or leave it empty to run tasks in-process",
            id="tideline.E004",
        )
    ]


@register()
def trusted_proxies_check(app_configs, **kwargs) -> list:
    try:
        trusted_proxies()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), hint="comma-separated addresses or CIDRs", id="tideline.E005")]
    return []


@register()
def private_files_check(app_configs, **kwargs) -> list:
    data_dir = Path(settings.DATA_DIR)
    files = [data_dir / "secret_key", Path(settings.TIDELINE_LLM_CONFIG_FILE)]
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        files += sqlite_files(str(database["NAME"]))
    problems = private_paths_too_open(directories=[data_dir], files=files)
    return [
        Warning(
            f"{problem}: other local users can read the memories, the owner's sessions or keys",
            hint="chmod 700 the data dir and 600 the files in it",
            id="tideline.W001",
        )
        for problem in problems
    ]


@register()
def llm_config_check(app_configs, **kwargs) -> list:
    try:
        llm_config_read()
    except LLMConfigInvalid as exc:
        return [
            Warning(
                f"{exc}; until then DREAM's LLM layers are skipped and the gate uses its rules",
                id="tideline.W002",
            )
        ]
    return []


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@register()
def exposure_check(app_configs, **kwargs) -> list:
    """Listening beyond loopback is allowed, but said out loud with what guards it."""
    host = settings.TIDELINE_HOST
    if _is_loopback(host):
        return []
    guards = [
        "API and MCP need a bearer API key",
        "the owner panel needs the owner's password "
        f"({settings.TIDELINE_LOGIN_FAILURES} failed logins per "
        f"{settings.TIDELINE_LOGIN_WINDOW_SECONDS} s, then 429)",
        f"{settings.TIDELINE_THROTTLE_AUTH_FAILURES_PER_MINUTE} wrong keys per address per "
        "minute, then 429",
        f"bodies over {settings.TIDELINE_API_MAX_BODY_BYTES} bytes refused",
    ]
    if settings.TIDELINE_SECURE:
        guards.append("HTTPS only (TIDELINE_SECURE=1: secure cookies, HSTS, redirect to https)")
        hint = "TLS must be terminated by uvicorn (--ssl-*) or a proxy in TIDELINE_TRUSTED_PROXIES"
    else:
        guards.append("NO TLS: keys and the owner's password cross the network in clear text")
        hint = "put it behind an HTTPS proxy and set TIDELINE_SECURE=1 and TIDELINE_TRUSTED_PROXIES"
    return [
        Warning(
            f"TIDELINE_HOST={host} listens beyond this machine; what protects it: "
            + "; ".join(guards),
            hint=hint,
            id="tideline.W003",
        )
    ]
