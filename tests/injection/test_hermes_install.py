"""Installing the Hermes provider where it cannot go is refused with a message, not a traceback."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command


def test_it_refuses_a_plugin_directory_that_is_a_file(tmp_path):
    plugin = tmp_path / "plugins" / "tideline"
    plugin.parent.mkdir()
    plugin.write_text("not a directory")
    with pytest.raises(CommandError, match="is not a directory"):
        call_command("hermes_install", "--hermes-home", str(tmp_path), stdout=StringIO())
    assert plugin.read_text() == "not a directory"


def test_it_reports_a_hermes_home_it_cannot_write(tmp_path):
    (tmp_path / "plugins").write_text("a file where the plugins directory should be")
    with pytest.raises(CommandError, match="cannot install into"):
        call_command("hermes_install", "--hermes-home", str(tmp_path), stdout=StringIO())
