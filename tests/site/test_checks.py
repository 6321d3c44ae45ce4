import json
import os
import subprocess
import sys

import pytest
from django.conf import settings as django_settings
from django.core.checks import Error, Warning

from tideline_site import checks

MANAGE = django_settings.BASE_DIR / "manage.py"


def ids(messages) -> list[str]:
    return [message.id for message in messages]


@pytest.mark.parametrize(
    ("provider", "url", "model", "expected"),
    [
        ("openai", "", "m", "needs TIDELINE_EMBEDDER_URL"),
        ("embed_batch", "", "", "needs TIDELINE_EMBEDDER_URL"),
        ("openai", "https://api.example.com/v1", "", "needs TIDELINE_EMBEDDER_MODEL"),
        ("openai", "http://embed.example.com/v1", "m", "must use HTTPS"),
        ("embed_batch", "https://u:sk-pw@embed.example.com/x", "", "must not contain credentials"),
        ("embed_batch", "localhost:9000", "", "http(s) URL"),
        ("openai", "https://api.example.com/v1?api_key=sk-x", "m", "must not have a query"),
    ],
)
def test_it_stops_an_embedder_that_would_fail_at_first_use(
    settings, provider, url, model, expected
):
    settings.TIDELINE_EMBEDDER = provider
    settings.TIDELINE_EMBEDDER_URL = url
    settings.TIDELINE_EMBEDDER_MODEL = model

    errors = checks.embedder_check(None)

    assert errors and all(isinstance(e, Error) and e.id == "tideline.E001" for e in errors)
    assert expected in " ".join(e.msg for e in errors)
    assert "sk-pw" not in " ".join(e.msg for e in errors)


@pytest.mark.parametrize(
    ("provider", "url"),
    [("bundled", ""), ("none", ""), ("embed_batch", "http://127.0.0.1:9000/embed")],
)
def test_it_passes_a_usable_embedder(settings, provider, url):
    settings.TIDELINE_EMBEDDER, settings.TIDELINE_EMBEDDER_URL = provider, url
    assert checks.embedder_check(None) == []


@pytest.mark.parametrize(
    "url", ["redis:/nohost", "http://127.0.0.1:6379/0", "redis://127.0.0.1:99999/0", "nonsense"]
)
def test_it_stops_a_broker_url_that_cannot_work(settings, url):
    settings.CELERY_BROKER_URL = url
    assert ids(checks.broker_check(None)) == ["tideline.E004"]


@pytest.mark.parametrize("url", ["", "redis://127.0.0.1:6379/0", "amqp://guest@rabbit//"])
def test_it_passes_a_broker_url_that_parses(settings, url):
    settings.CELERY_BROKER_URL = url
    assert checks.broker_check(None) == []


def test_it_warns_about_private_files_that_others_can_read(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    (tmp_path / "secret_key").write_text("k")
    (tmp_path / "secret_key").chmod(0o644)
    tmp_path.chmod(0o755)
    warnings = checks.private_files_check(None)
    assert ids(warnings) == ["tideline.W001", "tideline.W001"]
    assert "0755" in warnings[0].msg and "secret_key is 0644" in warnings[1].msg
    tmp_path.chmod(0o700)
    (tmp_path / "secret_key").chmod(0o600)
    assert checks.private_files_check(None) == []


def test_it_stops_a_data_dir_that_cannot_be_written(settings, tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    settings.DATA_DIR = not_a_dir
    errors = checks.data_dir_check(None)
    assert ids(errors) == ["tideline.E003"] and str(not_a_dir) in errors[0].msg


def test_it_passes_a_writable_data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    assert checks.data_dir_check(None) == []


def test_it_stops_bad_trusted_proxies(settings):
    settings.TIDELINE_TRUSTED_PROXIES = ["10.0.0.0/8", "proxy.local"]
    assert ids(checks.trusted_proxies_check(None)) == ["tideline.E005"]


def test_it_warns_about_a_bad_llm_config_file(settings, tmp_path):
    path = tmp_path / "llm.json"
    path.write_text(json.dumps({"base_url": None, "model": "m", "api_key": "sk-x"}))
    settings.TIDELINE_LLM_CONFIG_FILE = path
    warnings = checks.llm_config_check(None)
    assert ids(warnings) == ["tideline.W002"] and "base_url" in warnings[0].msg
    assert "sk-x" not in warnings[0].msg


def test_it_names_what_protects_a_non_loopback_address(settings):
    settings.TIDELINE_HOST = "0.0.0.0"
    warnings = checks.exposure_check(None)
    assert [type(w) for w in warnings] == [Warning] and warnings[0].id == "tideline.W003"
    assert "API key" in warnings[0].msg and "NO TLS" in warnings[0].msg
    settings.TIDELINE_SECURE = True
    assert "HTTPS only" in checks.exposure_check(None)[0].msg
    settings.TIDELINE_HOST = "127.0.0.1"
    assert checks.exposure_check(None) == []


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(MANAGE), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_it_fails_manage_check_with_a_clear_message_for_an_embedder_without_url(tmp_path):
    result = manage("check", TIDELINE_EMBEDDER="openai", TIDELINE_DATA_DIR=str(tmp_path))
    assert result.returncode == 1
    assert "tideline.E001" in result.stderr and "TIDELINE_EMBEDDER_URL" in result.stderr
    assert "Traceback" not in result.stderr


def test_it_fails_manage_check_for_a_missing_postgres_database(tmp_path):
    result = manage(
        "check",
        "--database",
        "default",
        TIDELINE_DATA_DIR=str(tmp_path),
        TIDELINE_DATABASE_URL="postgres://postgres@127.0.0.1:5432/tideline_no_such_db",
    )
    assert result.returncode == 1
    assert "tideline.E002" in result.stderr and "Traceback" not in result.stderr
    # The driver's reason, at once: not the connection pool's timeout after 30 s of retries.
    error = next(line for line in result.stderr.splitlines() if "tideline.E002" in line)
    assert 'database "tideline_no_such_db" does not exist' in error


def test_it_passes_check_deploy_with_no_warning_in_secure_mode(tmp_path):
    data = tmp_path / "data"
    result = manage("check", "--deploy", TIDELINE_SECURE="1", TIDELINE_DATA_DIR=str(data))
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout and "WARNINGS" not in result.stderr


def test_it_checks_the_owner_panel_admins_though_start_up_does_not_import_them():
    # Start-up leaves the admin modules to the URLconf; the admin system check must still see
    # every model admin, or `manage.py check` would pass a broken one.
    code = (
        "import os, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', "
        "'tideline_site.settings'); django.setup(); from django.contrib import admin; "
        "from django.core.checks import run_checks; before = len(admin.site._registry); "
        "run_checks(tags=['admin']); print(before, len(admin.site._registry))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=django_settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    before, after = out.stdout.split()
    assert before == "0", out.stderr
    assert int(after) >= 20, out.stderr


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("TIDELINE_BODY_TIMEOUT", "nan", "not a finite number"),
        ("TIDELINE_LLM_TIMEOUT", "inf", "not a finite number"),
        ("TIDELINE_T1_TOP", "201", "above the maximum 200"),
        ("TIDELINE_T1_MIN_COSINE", "1.5", "above the maximum"),
        ("TIDELINE_T1_MIN_COSINE", "nan", "not a finite number"),
        ("TIDELINE_T2_DAYS", "1000000000", "above the maximum"),
        ("TIDELINE_T2B_FIRST_HOURS", "30000000000", "above the maximum"),
        ("TIDELINE_EMBED_SWEEP_LIMIT", "99999999999999999999999", "above the maximum"),
        ("TIDELINE_DREAM_LEASE_SECONDS", "99999999999999999999999", "above the maximum"),
        ("TIDELINE_TIME_ZONE", "Mars/Base", "not a time zone"),
        ("TIDELINE_LOG_LEVEL", "LOUD", "must be one of"),
    ],
)
def test_it_stops_at_start_on_a_setting_that_would_fail_at_run_time(
    tmp_path, variable, value, named
):
    """Before, each of these started cleanly: nan and inf passed every range check (a body
    timeout of inf never fired), a huge count overflowed a date or an integer on the first session
    start, DREAM run or sweep, and a bad time zone or log level was a traceback naming neither."""
    result = manage("check", **{variable: value}, TIDELINE_DATA_DIR=str(tmp_path))

    assert result.returncode != 0
    assert variable in result.stderr and named in result.stderr
    assert "Traceback" not in result.stderr


def test_it_reads_an_empty_host_list_as_unset(tmp_path):
    result = manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.ALLOWED_HOSTS)",
        TIDELINE_ALLOWED_HOSTS="",
        TIDELINE_DATA_DIR=str(tmp_path),
    )

    assert "127.0.0.1" in result.stdout, result.stderr
