"""Every management command Tideline ships is exercised by a test (the netbox rule): a command that
no test runs is a command nobody knows still works."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = ("memory", "dream", "injection")


def shipped_commands() -> list[str]:
    return sorted(
        path.stem
        for app in APPS
        for path in (ROOT / app / "management" / "commands").glob("*.py")
        if path.stem != "__init__"
    )


def all_test_sources() -> str:
    return "\n".join(
        path.read_text()
        for path in (ROOT / "tests").rglob("test_*.py")
        if path.name != Path(__file__).name
    )


def runs_command(source: str, name: str) -> bool:
    """A test runs a command through call_command, a thin `run("name")` helper around it, or a
    `manage.py name` subprocess."""
    quoted = rf"""["']{re.escape(name)}["']"""
    patterns = (
        rf"call_command\(\s*{quoted}",
        rf"\brun\w*\(\s*{quoted}",
        rf"manage\.py[\"']?\s*,\s*{quoted}",
    )
    return any(re.search(pattern, source) for pattern in patterns)


def test_it_finds_the_commands():
    assert {"bench", "dream", "maintain", "mcp", "owner_init"} <= set(shipped_commands())
    assert not runs_command(all_test_sources(), "no_such_command")


@pytest.mark.parametrize("name", shipped_commands())
def test_it_has_a_test_that_runs_each_command(name):
    assert runs_command(all_test_sources(), name), f"no test runs `manage.py {name}`"
