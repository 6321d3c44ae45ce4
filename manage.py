#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideline_site.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

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


if __name__ == "__main__":
    main()
