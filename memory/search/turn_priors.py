"""What turn_search adds to a turn's fused score besides relevance (issue 14; tuned on LoCoMo
conversations 0–4, confirmed on 5–9 and RealMem, figures in tools/recall/README.md):

- **time** (memory/search/timing.py): a question that asks when prefers turns that place
  themselves in time; one that names a day prefers the turns of that day and the week after it,
  and "yesterday" or "last week" names them as seen from `asked_at`.
- **named speaker**: a question that names a person who speaks in the conversation ("What does
  Melanie do to destress?") is mostly answered by that person's own turns, while the other
  speaker's replies ("Thanks, Melanie! …") share the words. `TIDELINE_SEARCH_PRIOR_SPEAKER` is
  added to the turns of every speaker the query names. Roles (user, assistant) are not names.
- **opening turn**: a conversation between named people opens with the news since they last
  talked ("Hey Joanna! Crazy thing happened - I won a big Valorant tournament last Saturday"), and
  the rest of the session talks around it. `TIDELINE_SEARCH_PRIOR_OPENING` is added to the first
  turn of a session when its speaker is one the query names. On LoCoMo 58% of the sessions' first
  turns are a question's evidence against 23% of the rest; between a user and an assistant nobody
  is named, and there the first turn carries no such weight (given to every first turn, RealMem's
  turn recall fell 0.002), so those are left alone.
- **asking turns**: a question about a person of the conversation is answered by a turn that
  states something, while the turns that ask about it ("Wow, Melanie! What made you try
  pottery?") repeat its words. When the query ends with a question mark and names a speaker,
  `TIDELINE_SEARCH_PRIOR_QUESTION` is subtracted from every turn that ends with one. Between a user
  and an assistant nobody is named, and there a user's earlier question is what marks the topic a
  new question returns to (on RealMem, lowering asking turns for every question costs its tune
  half 0.006 of collapsed session R@5), so those are left alone, as is a query that is not a
  question.
- **answer type**: a question that opens by asking how many (much, long, often) is answered by a
  turn that states a number, and one that opens by asking where by a turn that names something;
  `TIDELINE_SEARCH_PRIOR_ANSWER` is added to those turns. A dialogue-length query that says "how
  much" in passing does not open with it.
- **length**: `TIDELINE_SEARCH_PRIOR_LENGTH` x log(1 + the distinct terms of the turn's own
  document, its text and its speaker's name, up to LENGTH_PRIOR_TERMS). A turn's document also holds its neighbours' words,
  so a two-word "Adopted a turtle!" or "Thanks!" beside the turn that tells the story matches the
  same question nearly as well while holding less to be evidence of; every turn gets it, whatever
  the query.
- **replies** are not a prior: a reply's share of its question's score depends on that score,
  so `_rank` (memory/search/service.py) adds it (`TIDELINE_SEARCH_REPLY_SHARE`).
- **expansion** (memory/search/expansion.py): `TIDELINE_SEARCH_EXPANSION_WEIGHT` × the BM25 of the
  words nearest the query's words ("kid" for "child"), scaled to the best eligible turn.
"""

from collections.abc import Callable
from datetime import datetime

import numpy as np
from django.conf import settings

from memory.search.index import TurnIndex
from memory.search.intent import answer_priors, ends_asking
from memory.search.timing import time_priors

# The length prior stops growing at this many distinct own terms: past it a turn says enough to
# be evidence, and more is an assistant's essay, not more evidence (uncapped, RealMem's turn
# recall fell 0.025 at R@5; at 20 it does not move, and LoCoMo keeps the gain).
LENGTH_PRIOR_TERMS = 20


def turn_priors(
    *,
    index: TurnIndex,
    query: str,
    terms: list[str],
    expansions: dict[str, list[str]],
    eligible: np.ndarray,
    stats_rows: np.ndarray,
    asked_at: datetime,
) -> Callable[[np.ndarray], np.ndarray] | None:
    """The priors of `query`, asked at `asked_at` (its resolved lexical `terms`, and the words
    chosen to expand them) over `index`'s rows, or None when it has none. BM25 statistics come from `stats_rows`, the
    caller's visible turns; only `eligible` rows score."""
    table = index.table
    parts = []
    expanded = sorted({word for words in expansions.values() for word in words})
    if expanded:
        extra = index.bm25(expanded, eligible, stats_rows)
        best = float(extra.max())
        if best > 0:
            share = np.float32(settings.TIDELINE_SEARCH_EXPANSION_WEIGHT / best)
            parts.append(lambda rows: share * extra[rows])
    timed = time_priors(
        query=query,
        asked_at=asked_at,
        occurred_at=table["occurred_at"],
        mentions=table["mentions_time"],
    )
    if timed is not None:
        parts.append(timed)
    weight = settings.TIDELINE_SEARCH_PRIOR_SPEAKER
    opening = settings.TIDELINE_SEARCH_PRIOR_OPENING
    penalty = settings.TIDELINE_SEARCH_PRIOR_QUESTION
    named = index.speakers_named(set(terms)) if weight or opening or penalty else []
    speakers, chosen = table["speaker"], np.asarray(named, dtype=np.int32)
    if named and weight:
        parts.append(lambda rows: np.float32(weight) * np.isin(speakers[rows], chosen))
    if named and opening:
        # seq counts from 1 in every session (memory/services/timeline.py).
        seq = table["seq"]
        parts.append(
            lambda rows: np.float32(opening) * (np.isin(speakers[rows], chosen) & (seq[rows] == 1))
        )
    if named and penalty and ends_asking(query):
        asks = table["asks"]
        parts.append(lambda rows: np.float32(-penalty) * asks[rows])
    answered = answer_priors(
        query=query, number_flags=table["states_number"], name_flags=table["names_proper"]
    )
    if answered is not None:
        parts.append(answered)
    length = settings.TIDELINE_SEARCH_PRIOR_LENGTH
    if length:
        # Over the candidates only: the whole table is every turn of the store.
        own_terms = table["own_terms"]
        parts.append(
            lambda rows: (
                np.float32(length)
                * np.log1p(np.minimum(own_terms[rows], LENGTH_PRIOR_TERMS)).astype(np.float32)
            )
        )
    if not parts:
        return None

    def priors(rows: np.ndarray) -> np.ndarray:
        total = np.zeros(len(rows), dtype=np.float32)
        for part in parts:
            total += part(rows)
        return total

    return priors
