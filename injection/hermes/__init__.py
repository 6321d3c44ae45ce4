"""Tideline's Hermes Agent memory provider.

`tideline/` is a Hermes plugin directory: `manage.py hermes_install` copies it to
`$HERMES_HOME/plugins/tideline/`, where Hermes' own loader (`plugins.memory`) discovers it. It
uses only the standard library, because it runs inside the Hermes environment, not Tideline's.
"""

from pathlib import Path

PLUGIN_DIR = Path(__file__).resolve().parent / "tideline"
