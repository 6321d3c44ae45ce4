"""session_search: earlier conversations ranked as wholes, for "which session was this about?".

A question that continues a piece of work ("what's the next step of the plan?") matches the session
that holds the plan better than any single turn of it: its words are spread over many turns, none of
which holds enough of them. Ranking turns and keeping each session's best (what turn_search's hits
collapsed to sessions give) scores a session by one turn; here a session is one document.

Score of a session, over the turns the caller may read in `scope_ids` (the same rows, postings and
cosines turn_search ranks):

    (1 - β) · [(1 - w) · bm25_session / max(bm25_session) + w · minmax(mean cosine of its turns)]
    + β · its best turn's fused score ((1 - w_turn) · bm25 / max + w_turn · minmax(cosine))

where bm25_session is BM25 over the session's turn bags summed (collection statistics over the
eligible sessions), w is the embedder's `session_semantic_weight`, β its `session_turn_share` and
w_turn its `turn_semantic_weight` (memory/search/calibration.py). A turn's bag holds each of its words
once and, at NEIGHBOUR_WEIGHT, the words of the turns around it, so a session's summed bag counts
every word (1 + 2 · NEIGHBOURS · WEIGHT) times: k1 is scaled by that factor, which makes the
saturation that of the session's own text. The best turn keeps what a single decisive turn says (a
short factual question names one turn; LoCoMo's session recall drops 2 points without it).

A session superseded by a newer one loses TIDELINE_SEARCH_PRIOR_SUPERSEDED (0.04): among the
query's best SUPERSEDE_POOL sessions, one whose mean turn vector is at least the embedder's
`session_supersede_cosine` (0.7 for the bundled model) alike to that of a session that went on later
is the older state of the same piece of work, and a returning user mostly continues from where it
got to (why names the newer session in `superseded_by`). On RealMem, tuned on the first four
personas and confirmed on the other six, session R@5 0.613 / 0.641 → 0.625 / 0.650 (Dynamic
Updating 0.628 → 0.641, Dynamic Incremental 0.655 → 0.666); LoCoMo, which asks about any past
session, does not move (S@5 0.905 / 0.895 → 0.905 / 0.896). Only sessions already among the best are
compared, so an older session on a topic is never lowered by a newer one the query did not reach.

Each hit carries the session's best turns (by the same fusion at turn level) as its evidence.
On PostgreSQL in native mode past TIDELINE_SEARCH_POSTGRES_EXACT_ROWS the rows are the query's
candidates, so a session is scored (and its mean vector, for being superseded, taken) by its turns
among them (as turn_search ranks only those); past
PROJECTION_MIN_ROWS vectors the cosines are the projected scan's, as turn_search's before its exact
re-score of the shortlist.
"""

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.conf import settings

from memory.models import ContextTurn, Session
from memory.search.service import (
    TurnHit,
    _among,
    _blas_one_thread,
    _check_common,
    _scope_labels,
    turns_open,
    turns_within,
)
from memory.search.text import text_terms

EVIDENCE_TURNS = 3
# The query's best sessions among which a newer one on the same topic supersedes an older one.
SUPERSEDE_POOL = 50


@dataclass
class SessionHit:
    session: Session
    score: float
    turns: list[TurnHit]
    why: dict = field(default_factory=dict)


def _bag_factor() -> float:
    """How many times a session's summed turn bags count each of its words."""
    return 1.0 + 2 * settings.TIDELINE_SEARCH_TURN_NEIGHBOURS * (
        settings.TIDELINE_SEARCH_NEIGHBOUR_WEIGHT
    )


def _minmax(values: np.ndarray) -> np.ndarray:
    if not len(values):
        return values
    low, high = float(values.min()), float(values.max())
    if high <= low:
        return np.zeros_like(values)
    return (values - low) / (high - low)


def session_search(
    *,
    query: str,
    scope_ids: list[int],
    limit: int = 10,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[SessionHit]:
    """Sessions in `scope_ids` whose conversation matches `query`, best first, each with its best
    turns and why. `since`/`until` bound the turns that count (occurred_at)."""
    query = _check_common(query, scope_ids, limit)
    if not scope_ids or not query:
        return []
    index, calibration, vector, _ = turns_open(query=query, scope_ids=scope_ids)
    with index.lock:
        table = index.table
        in_scope = table["alive"] & _among(table["scope"], scope_ids)
        eligible = turns_within(table, in_scope, since=since, until=until)
        rows = np.flatnonzero(eligible)
        if not len(rows):
            return []
        codes, slot_of_row = np.unique(table["session"][rows], return_inverse=True)
        count = len(codes)
        slot = np.full(table.size, -1, dtype=np.int64)
        slot[rows] = slot_of_row

        terms = index.terms_resolve(text_terms(query), scope_ids=scope_ids, stats_rows=in_scope)
        lexical, term_tfs = _session_bm25(index, terms, rows, slot, count)
        turn_bm25 = index.bm25(terms, eligible, eligible)[rows]

        cosine = None
        mean_cosine = np.zeros(count, dtype=np.float64)
        has_vector = table["has_vector"][rows]
        if vector is not None and has_vector.any():
            with _blas_one_thread():
                cosine = index.cosines(vector)[0][rows].astype(np.float64)
            sums = np.bincount(slot_of_row[has_vector], cosine[has_vector], minlength=count)
            counts = np.bincount(slot_of_row[has_vector], minlength=count)
            floor = min(float(cosine[has_vector].min()), calibration.noise_floor)
            mean_cosine = np.where(counts > 0, sums / np.maximum(counts, 1), floor)
            cosine = np.where(has_vector, cosine, floor)

        # The session as one document, and its best turn as turn_search would fuse it.
        weight = calibration.session_semantic_weight if cosine is not None else 0.0
        lexical_part = (1.0 - weight) * _scaled(lexical)
        semantic_part = weight * _minmax(mean_cosine)
        turn_weight = calibration.turn_semantic_weight if cosine is not None else 0.0
        turn_score = (1.0 - turn_weight) * _scaled(turn_bm25)
        if cosine is not None:
            turn_score += turn_weight * _minmax(cosine)
        best_turn = np.zeros(count, dtype=np.float64)
        np.maximum.at(best_turn, slot_of_row, turn_score)
        share = calibration.session_turn_share
        document_part = (1.0 - share) * (lexical_part + semantic_part)
        turn_part = share * best_turn
        score = document_part + turn_part

        matched = lexical > 0
        if cosine is not None and terms:
            matched |= mean_cosine >= calibration.turn_floor
        elif cosine is not None:
            # A query with no word to search by ("?!"): a session counts only when a turn of it is
            # above the model's noise floor, as turn_search then asks of each turn.
            best_cosine = np.full(count, -1.0)
            np.maximum.at(best_cosine, slot_of_row, cosine)
            matched = best_cosine >= calibration.noise_floor
        candidates = np.flatnonzero(matched)
        if not len(candidates):
            return []
        superseded_by = np.full(count, -1, dtype=np.int64)
        penalty = settings.TIDELINE_SEARCH_PRIOR_SUPERSEDED
        if penalty and cosine is not None and calibration.session_supersede_cosine is not None:
            pool = candidates[np.lexsort((codes[candidates], -score[candidates]))][:SUPERSEDE_POOL]
            superseded_by = _superseded(
                index=index,
                rows=rows,
                slot_of_row=slot_of_row,
                has_vector=has_vector,
                pool=pool,
                count=count,
                threshold=calibration.session_supersede_cosine,
            )
        superseded_part = -penalty * (superseded_by >= 0)
        score = score + superseded_part
        order = candidates[np.lexsort((codes[candidates], -score[candidates]))][:limit]
        evidence = _session_evidence(slot_of_row=slot_of_row, chosen=order, turn_score=turn_score)
        ranked = []
        for position in order:
            ranked.append(
                (
                    int(codes[position]),
                    float(score[position]),
                    {
                        "matched_terms": [t for t, tf in term_tfs.items() if tf[position] > 0],
                        "lexical_score": round(float(lexical[position]), 4),
                        "lexical_share": round(float((1.0 - share) * lexical_part[position]), 4),
                        "mean_cosine": round(float(mean_cosine[position]), 4)
                        if cosine is not None
                        else None,
                        "semantic_share": round(float((1.0 - share) * semantic_part[position]), 4),
                        "best_turn_share": round(float(turn_part[position]), 4),
                        "superseded_share": round(float(superseded_part[position]), 4),
                        "superseded_by": int(codes[superseded_by[position]])
                        if superseded_by[position] >= 0
                        else None,
                        "score": round(float(score[position]), 4),
                    },
                    [
                        (
                            int(table["id"][rows[at]]),
                            float(turn_score[at]),
                            float(turn_bm25[at]),
                            float(cosine[at]) if cosine is not None and has_vector[at] else None,
                        )
                        for at in evidence[int(position)]
                    ],
                )
            )
    return _hits(index, scope_ids, ranked)


def _scaled(values: np.ndarray) -> np.ndarray:
    top = float(values.max()) if len(values) else 0.0
    return values / top if top > 0 else values


def _session_bm25(index, terms: list[str], rows: np.ndarray, slot: np.ndarray, count: int):
    """BM25 of every eligible session (slot), its document the sum of its turns' bags, and each
    matched term's summed frequency per session."""
    scores = np.zeros(count, dtype=np.float64)
    term_tfs: dict[str, np.ndarray] = {}
    if not terms:
        return scores, term_tfs
    lengths = np.bincount(slot[rows], weights=index.table["length"][rows], minlength=count)
    average = float(lengths.mean()) or 1.0
    k1 = settings.TIDELINE_SEARCH_BM25_K1 * _bag_factor()
    b = settings.TIDELINE_SEARCH_SESSION_BM25_B
    norm = k1 * (1 - b + b * lengths / average)
    for term in dict.fromkeys(terms):
        posting = index.postings.get(term)
        if posting is None:
            continue
        term_rows, tfs = posting
        inside = slot[term_rows] >= 0
        if not inside.any():
            continue
        tf = np.bincount(slot[term_rows[inside]], weights=tfs[inside], minlength=count)
        df = int(np.count_nonzero(tf))
        idf = np.log(1 + (count - df + 0.5) / (df + 0.5))
        scores += idf * tf * (k1 + 1) / (tf + norm)
        term_tfs[term] = tf
    return scores, term_tfs


def _superseded(
    *,
    index,
    rows: np.ndarray,
    slot_of_row: np.ndarray,
    has_vector: np.ndarray,
    pool: np.ndarray,
    count: int,
    threshold: float,
) -> np.ndarray:
    """For every session slot, the slot of the newest session in `pool` on the same topic (mean
    turn vectors at least `threshold` alike) that went on later than it, or -1."""
    superseded_by = np.full(count, -1, dtype=np.int64)
    if len(pool) < 2:
        return superseded_by
    place = np.full(count, -1, dtype=np.int64)
    place[pool] = np.arange(len(pool))
    inside = np.flatnonzero((place[slot_of_row] >= 0) & has_vector)
    owner = place[slot_of_row[inside]]
    # Each pool session's summed turn vectors as one product (np.add.at over 512 columns costs
    # ten times more).
    membership = np.zeros((len(pool), len(inside)), dtype=np.float32)
    membership[owner, np.arange(len(inside))] = 1.0
    means = membership @ index.row_vectors(rows[inside])
    norms = np.linalg.norm(means, axis=1)
    means[norms > 0] /= norms[norms > 0, None]
    # When a session last went on: the newer of two on one topic holds where the work got to.
    latest = np.full(len(pool), -np.inf)
    np.maximum.at(latest, owner, index.table["occurred_at"][rows[inside]])
    alike = (means @ means.T >= threshold) & (norms[:, None] > 0) & (norms[None, :] > 0)
    later = latest[None, :] > latest[:, None]
    for position in np.flatnonzero((alike & later).any(axis=1)):
        newer = np.flatnonzero(alike[position] & later[position])
        superseded_by[pool[position]] = pool[newer[np.argmax(latest[newer])]]
    return superseded_by


def _session_evidence(*, slot_of_row, chosen, turn_score) -> dict[int, list[int]]:
    """{session slot: positions of its best EVIDENCE_TURNS turns, best first} for the chosen."""
    wanted = {int(position): [] for position in chosen}
    inside = np.flatnonzero(np.isin(slot_of_row, list(wanted)))
    for at in inside[np.lexsort((inside, -turn_score[inside]))]:
        held = wanted[int(slot_of_row[at])]
        if len(held) < EVIDENCE_TURNS:
            held.append(int(at))
    return wanted


def _hits(index, scope_ids: list[int], ranked: list) -> list[SessionHit]:
    sessions = Session.objects.in_bulk([pk for pk, *_ in ranked])
    turn_ids = [turn_id for *_, turns in ranked for turn_id, *_ in turns]
    turns = ContextTurn.objects.defer("embedding").in_bulk(turn_ids)
    labels = _scope_labels(index, scope_ids)
    hits = []
    for pk, score, why, evidence in ranked:
        session = sessions.get(pk)
        if session is None:
            continue
        why["scope"] = labels.get(session.scope_id, str(session.scope_id))
        hits.append(
            SessionHit(
                session=session,
                score=score,
                turns=[
                    TurnHit(
                        turn=turns[turn_id],
                        score=turn_score,
                        lexical=bm25,
                        semantic=cos,
                        why={"score": round(turn_score, 4)},
                    )
                    for turn_id, turn_score, bm25, cos in evidence
                    if turn_id in turns
                ],
                why=why,
            )
        )
    return hits
