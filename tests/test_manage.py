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
