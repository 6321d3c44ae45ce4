"""Long commands draw a progress bar on a terminal, and nothing in a pipe or with -v0."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from memory.services.facts import FactInput, fact_write
from memory.services.scopes import scope_global

pytestmark = pytest.mark.django_db


class Terminal(StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def sessions_file(tmp_path):
    path = tmp_path / "export.jsonl"
    rows = [{"session": "g-1", "role": "user", "content": f"turn {n}"} for n in range(3)]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return path


def test_it_draws_the_import_progress_on_a_terminal(sessions_file):
    err = Terminal()

    call_command("import_sessions", str(sessions_file), stdout=StringIO(), stderr=err)

    assert "importing" in err.getvalue() and "1/1" in err.getvalue()


@pytest.mark.parametrize("verbosity,stream", [(1, StringIO), (0, Terminal)])
def test_it_stays_quiet_in_a_pipe_or_with_v0(sessions_file, verbosity, stream):
    err = stream()

    call_command(
        "import_sessions", str(sessions_file), verbosity=verbosity, stdout=StringIO(), stderr=err
    )

    assert err.getvalue() == ""


def test_it_draws_one_bar_per_kind_when_reembedding():
    fact_write(
        data=FactInput(
            scope_id=scope_global().pk,
            profile_name="user",
            kind="preference",
            predicate="editor",
            value="helix",
        )
    )
    err = Terminal()

    call_command("reembed", "--all", stdout=StringIO(), stderr=err)

    assert "memories" in err.getvalue() and "100%" in err.getvalue()


def test_it_draws_the_reindex_check_on_a_terminal(db):
    err = Terminal()

    call_command("reindex", "--check", stdout=StringIO(), stderr=err)

    assert "checking" in err.getvalue() and "2/2" in err.getvalue()
