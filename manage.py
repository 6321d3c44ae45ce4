#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideline_site.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line
    from django.db import OperationalError

    for argument in sys.argv[1:]:
        # Bytes that are not UTF-8 reach Python as lone surrogates, which no database and no file
        # name Tideline writes can hold: refused here, once for every command.
        if argument != argument.encode("utf-8", "replace").decode("utf-8"):
            sys.exit(f"tideline: the argument {argument!r} is not UTF-8 text")
    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A bad setting (an environment variable out of range, say) is the operator's to fix:
        # say which and how, without a traceback.
        sys.exit(f"tideline: {exc}")
    except OperationalError as exc:
        # The database is down, unreachable or refuses us: the operator's to fix as well. The
        # first line names the cause (the server's own words); the rest is the driver's detail.
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        sys.exit(f"tideline: the database cannot be used: {reason}")


if __name__ == "__main__":
    main()
