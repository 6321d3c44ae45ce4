import os
import subprocess
import sys

from django.conf import settings


def test_it_refuses_an_argument_that_is_not_utf8_without_a_traceback():
    """Bytes that are not UTF-8 reach a command as lone surrogates; before, `apikey create --name
    $'bad\\xff'` and `import_store` answered with a UnicodeEncodeError traceback."""
    completed = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "apikey",
            "create",
            "--scope",
            "global",
            "--name",
            b"bad\xff",
        ],
        cwd=settings.BASE_DIR,
        capture_output=True,
        timeout=60,
    )

    assert completed.returncode != 0
    assert b"is not UTF-8 text" in completed.stderr
    assert b"Traceback" not in completed.stderr


def test_it_says_in_one_line_that_the_database_cannot_be_reached(tmp_path):
    """Before, a command against a PostgreSQL server that is not there ended in a traceback."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    completed = subprocess.run(
        [sys.executable, "manage.py", "stats"],
        cwd=settings.BASE_DIR,
        capture_output=True,
        timeout=120,
        env={
            **os.environ,
            "TIDELINE_DATA_DIR": str(data),
            "TIDELINE_DATABASE_URL": "postgres://tideline@127.0.0.1:1/absent",
            "TIDELINE_POSTGRES_POOL_SIZE": "0",
        },
    )

    assert completed.returncode != 0
    assert b"Traceback" not in completed.stderr
    [line] = completed.stderr.decode().strip().splitlines()
    assert line.startswith("tideline: the database cannot be used: ")
    assert "127.0.0.1" in line or "refused" in line
