"""What a hit's `why` must say, whichever search returned it."""

import pytest


def shares_sum_to_score(hit) -> bool:
    """The lexical and semantic shares and every boost add up to the score the hit reports."""
    why = hit.why
    parts = why["lexical_share"] + why["semantic_share"] + sum(why["boosts"].values())
    return why["score"] == pytest.approx(parts, abs=3e-4)
