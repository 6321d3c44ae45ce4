#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideline_site.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A bad setting (an environment variable out of range, say) is the operator's to fix:
        # say which and how, without a traceback.
        sys.exit(f"tideline: {exc}")


if __name__ == "__main__":
    main()
