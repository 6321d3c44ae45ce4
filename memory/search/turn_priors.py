"""What turn_search adds to a turn's fused score besides relevance (issue 14; tuned on LoCoMo
conversations 0–4, confirmed on 5–9 and RealMem, figures in tools/recall/README.md):

- **time** (memory/search/timing.py): a question that asks when prefers turns that place
  themselves in time; one that names a day prefers the turns of that day and the week after it.
- **named speaker**: a question that names a person who speaks in the conversation ("What does
  Melanie do to destress?") is mostly answered by that person's own turns, while the other
  speaker's replies ("Thanks, Melanie! …") share the words. `TIDELINE_SEARCH_PRIOR_SPEAKER` is
  added to the turns of every speaker the query names. Roles (user, assistant) are not names.
"""

from collections.abc import Callable

import numpy as np
from django.conf import settings

from memory.search.index import TurnIndex
from memory.search.timing import turn_time_priors


def turn_priors(
    *, index: TurnIndex, query: str, terms: list[str]
) -> Callable[[np.ndarray], np.ndarray] | None:
    """The priors of `query` (its resolved lexical `terms`) over `index`'s rows, or None when it
    has none."""
    table = index.table
    parts = []
    timed = turn_time_priors(
        query=query, occurred_at=table["occurred_at"], mentions=table["mentions_time"]
    )
    if timed is not None:
        parts.append(timed)
    weight = settings.TIDELINE_SEARCH_PRIOR_SPEAKER
    named = index.speakers_named(set(terms)) if weight else []
    if named:
        speakers = table["speaker"]
        chosen = np.asarray(named, dtype=np.int32)
        parts.append(lambda rows: np.float32(weight) * np.isin(speakers[rows], chosen))
    if not parts:
        return None

    def priors(rows: np.ndarray) -> np.ndarray:
        total = np.zeros(len(rows), dtype=np.float32)
        for part in parts:
            total += part(rows)
        return total

    return priors
