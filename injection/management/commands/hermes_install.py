"""`manage.py hermes_install [--hermes-home DIR]`: put Tideline's memory provider where Hermes
Agent discovers user plugins ($HERMES_HOME/plugins/tideline/)."""

import os
import shutil
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from injection.hermes import PLUGIN_DIR


def hermes_home_default() -> Path:
    return Path(os.environ.get("HERMES_HOME") or Path.home() / ".hermes").expanduser()


class Command(BaseCommand):
    help = "Install Tideline's Hermes Agent memory provider into $HERMES_HOME/plugins/tideline/."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--hermes-home", type=Path, default=None, help="default: $HERMES_HOME or ~/.hermes"
        )

    def handle(self, *args, hermes_home, **options) -> None:
        home = (hermes_home or hermes_home_default()).expanduser().resolve()
        if home.exists() and not home.is_dir():
            raise CommandError(f"{home} is not a directory")
        target = home / "plugins" / "tideline"
        if target.exists() and not target.is_dir():
            raise CommandError(f"{target} exists and is not a directory; nothing was installed")
        try:
            shutil.copytree(
                PLUGIN_DIR,
                target,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        except OSError as exc:
            raise CommandError(f"cannot install into {target}: {exc.strerror or exc}") from exc
        self.stdout.write(f"Installed the Tideline memory provider in {target}")
        self.stdout.write(
            "Activate it: hermes config set memory.provider tideline, then "
            "hermes memory setup (asks for TIDELINE_API_KEY and TIDELINE_URL)"
        )
