"""`manage.py next_steps [--first-run]`: how to connect Claude Code, an MCP client and Hermes."""

import os
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from injection.services.onboarding import Checkout, next_steps_render

SHOWN_MARKER = "next-steps-shown"


class Command(BaseCommand):
    help = "Print the next steps after ./tideline up, with this checkout's paths."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--first-run", action="store_true", help="print only the first time (./tideline up)"
        )

    def handle(self, *args, first_run: bool, **options) -> None:
        marker = Path(settings.DATA_DIR) / SHOWN_MARKER
        if first_run and marker.exists():
            return
        checkout = Checkout(
            root=Path(settings.BASE_DIR),
            python=Path(os.path.abspath(sys.executable)),
            url=f"http://{settings.TIDELINE_HOST}:{settings.TIDELINE_PORT}",
        )
        self.stdout.write(next_steps_render(checkout=checkout))
        if first_run:
            marker.touch()
