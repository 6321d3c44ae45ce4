"""A budget the API accepts but that holds nothing says so."""

import pytest

from injection.services.context import context_session_start, context_turn
from memory.services.scopes import scope_visible_ids
from memory.services.threads import thread_write
from tests.injection.conftest import narrative_seed, weights_set

pytestmark = pytest.mark.django_db


def test_it_says_when_the_budget_is_below_the_envelope(project):
    """Before, a budget of 50–90 tokens (the field's lower bound is 50) gave an empty block and
    an empty `skipped`, as if the store held nothing."""
    weights_set({narrative_seed(project, "the archive layout is settled"): 0.9})
    scope_ids = scope_visible_ids(scope=project)

    start = context_session_start(scope_ids=scope_ids, budget_tokens=50)
    turn = context_turn(query="the archive layout", scope_ids=scope_ids, budget_tokens=50)

    for block in (start, turn):
        assert block.text == "" and block.tokens == 0
        assert block.skipped.startswith("budget below the block's envelope")


def test_it_says_when_no_line_fits_after_the_envelope(project):
    thread_write(scope_id=project.pk, content="why the archive " + "layout " * 300, importance=5)
    scope_ids = scope_visible_ids(scope=project)
    envelope = int(context_session_start(scope_ids=scope_ids, budget_tokens=50).skipped.split()[-2])

    block = context_session_start(scope_ids=scope_ids, budget_tokens=envelope + 20)

    assert block.text == ""
    assert block.skipped.startswith("budget too small for any line")
    # With nothing to show, an empty block is just that.
    assert context_turn(query="zz", scope_ids=scope_ids, budget_tokens=envelope + 20).skipped == ""
