"""memory_search and turn_search: hybrid lexical + semantic ranking with filters and reasons.

Score of a candidate (all weights are settings, see README "Search"):

    (1 - w) · bm25 / max(bm25) + w · minmax(cosine)          w = TIDELINE_SEARCH_SEMANTIC_WEIGHT
    + keyword boost          when a literal part of the query (an identifier such as whale-listen,
                             a quoted phrase, a CJK run) occurs verbatim in the text; in full for a
                             query of up to LITERAL_FULL_TERMS distinct terms, fading beyond
    + lifecycle priors       memories only: salience (weight raised by emotion intensity),
                             pinned, recency, and decision-layer narratives when the query asks
                             about a past choice (memory/search/intent.py)
    + answer priors          memories and turns: a question that asks when prefers rows that place
                             themselves in time, one that opens with how many a row that states a
                             number, one that opens with where a row that names something
    + turn priors            turns only: a question that names a day prefers the turns of that
                             day and the week after it, one that names a speaker that speaker's
                             turns (memory/search/turn_priors.py)

A candidate with no lexical match needs a cosine of at least the semantic floor: pure similarity
below it is noise, not recall. (Turns have none, to fill their top k by meaning behind the keyword
hits, but a query with no word to search by meets the noise floor there too.) A literal keyword hit in a short query therefore always outranks
pure similarity; in a dialogue-length query an incidental "follow-up" or "2-3" is one term among
dozens and must not outweigh the whole rest of the match.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.conf import settings
from django.db import connection
from django.utils import timezone

from memory.models import (
    ContextTurn,
    Fact,
    Memory,
    MemoryStatus,
    MemoryType,
    Narrative,
    NarrativeLayer,
    NarrativeTag,
    Scope,
    SelfConcept,
)
from memory.search import postgres, schema
from memory.search.calibration import Calibration, calibration_get
from memory.search.expansion import expansion_candidates, expansion_choose
from memory.search.index import (
    LAYER_CODES,
    PROJECTION_SHORTLIST,
    STATUS_CODES,
    TYPE_CODES,
    MemoryIndex,
    SearchIndex,
    TurnIndex,
)
from memory.search.intent import answer_priors, asks_about_choice
from memory.search.text import (
    INDEXED_TEXT_MAX_CHARS,
    query_literals,
    text_compared,
    text_terms,
)
from memory.search.timing import time_priors
from memory.search.turn_priors import turn_priors
from memory.services.bounds import text_bounded, text_well_formed
from memory.services.errors import InvalidInput

logger = logging.getLogger("tideline.search")

MAX_LIMIT = 200
RECENCY_HALF_LIFE_DAYS = 30.0
DECISION_LAYER = LAYER_CODES[NarrativeLayer.DECISION]
DEFAULT_STATUSES = (MemoryStatus.ACTIVE,)
TYPE_NAMES = {code: kind for kind, code in TYPE_CODES.items()}
AS_OF_STATUSES = (MemoryStatus.ACTIVE, MemoryStatus.SUPERSEDED, MemoryStatus.EXPIRED)
COMMON_LITERAL_SHARE = 0.2
COMMON_LITERAL_MIN_ROWS = 20
RAW_TEXT_CHUNK = 5000
# Past this many distinct query terms the keyword boost shrinks as LITERAL_FULL_TERMS / terms.
# 8 keeps every LoCoMo question's boost whole (their figures do not move) while RealMem's
# dialogue-length queries stop ranking by incidental identifiers (session R@5 +0.003 turns, +0.004
# memories); 4 was measured too and lost RealMem temporal memory recall.
LITERAL_FULL_TERMS = 8
# TIDELINE_SEARCH_REPLY_SHARE: only a question among this many best turns lends its reply a share.
REPLY_QUESTIONS = 50


@dataclass
class MemoryHit:
    memory: Memory
    score: float
    lexical: float
    semantic: float | None
    why: dict = field(default_factory=dict)


@dataclass
class TurnHit:
    turn: ContextTurn
    score: float
    lexical: float
    semantic: float | None
    why: dict = field(default_factory=dict)


_indexes: dict[str, SearchIndex] = {}
_indexes_lock = threading.Lock()
_blas = None


def _blas_one_thread():
    """One BLAS thread on the query path: on a small shared box two threads per query spike
    latency under load. The controller is built once; building it scans loaded libraries."""
    global _blas
    if _blas is None:
        from threadpoolctl import ThreadpoolController

        _blas = ThreadpoolController()
    return _blas.limit(limits=1, user_api="blas")


def _among(column: np.ndarray, values) -> np.ndarray:
    """column ∈ values, as a mask; a few equality passes beat np.isin's sort for short lists."""
    mask = np.zeros(column.shape[0], dtype=bool)
    for value in set(values):
        mask |= column == value
    return mask


def search_index(kind: str) -> SearchIndex:
    """This process's index for `kind` ("memory" or "turn"), refreshed to the change log's tip; on
    PostgreSQL in native mode a handle whose `narrow` gives each query its candidate view."""
    from memory.services.embedding import embedder_get

    embedder = embedder_get()
    model_id = embedder.model_id if embedder is not None else None
    dim = embedder_dimension(embedder)
    native = postgres.native_active()
    with _indexes_lock:
        index = _indexes.get(kind)
        if (
            index is None
            or index.model_id != model_id
            or (dim and index.dim != dim)
            or isinstance(index, postgres.NativeSearch) != native
        ):
            if native:
                index = postgres.NativeSearch(kind=kind, model_id=model_id, dim=dim)
            else:
                index = (MemoryIndex if kind == "memory" else TurnIndex)(model_id=model_id, dim=dim)
            _indexes[kind] = index
    index.refresh()
    return index


def embedder_dimension(embedder) -> int:
    if embedder is None:
        return 0
    if getattr(embedder, "dim", None):
        return embedder.dim
    for model in (Memory, ContextTurn):
        blob = (
            model.objects.filter(embedding_model=embedder.model_id, embedding__isnull=False)
            .values_list("embedding", flat=True)
            .first()
        )
        if blob:
            return len(bytes(blob)) // 4
    return 0


def _query_vector(query: str, index: SearchIndex) -> np.ndarray | None:
    from memory.services.embedding import embedder_get

    embedder = embedder_get()
    if embedder is None or index.model_id != embedder.model_id:
        return None
    try:
        vector = embedder.embed_query(query)
    except Exception:
        # Search still answers by keyword; the failure is logged, not hidden.
        logger.exception("query embedding failed; searching by keyword only")
        return None
    return vector if vector.shape[0] == index.dim else None


def _literal_trigram_ids(kind: str, literal: str, scope_ids: list[int]) -> set[int]:
    """Rows whose raw text contains `literal`, via the FTS5 trigram index (SQLite) or ILIKE."""
    if connection.vendor == "sqlite":
        table = schema.MEMORY_TRIGRAM if kind == "memory" else schema.TURN_TRIGRAM
        phrase = '"' + literal.replace('"', '""') + '"'
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH %s", [phrase])
            return {row[0] for row in cursor.fetchall()}
    if kind == "memory":
        rows = Memory.objects.filter(scope_id__in=scope_ids, search_text__icontains=literal)
    else:
        rows = ContextTurn.objects.filter(scope_id__in=scope_ids, content__icontains=literal)
    return set(rows.values_list("pk", flat=True))


def _raw_texts(index: SearchIndex, ids: list[int]) -> dict[int, str]:
    held = index.held_texts or {}
    texts = {pk: held[pk] for pk in ids if pk in held}
    ids = [pk for pk in ids if pk not in held]
    if not ids:
        return texts
    model, field_name = (
        (Memory, "search_text") if index.kind == "memory" else (ContextTurn, "content")
    )
    table = connection.ops.quote_name(model._meta.db_table)
    column = connection.ops.quote_name(model._meta.get_field(field_name).column)
    key = connection.ops.quote_name(model._meta.pk.column)
    pairs = []
    # Plain statements: for the few dozen rows a query verifies, compiling an ORM query costs
    # several times the read itself. Chunked, because a store ranked without the projected scan
    # may verify more rows than SQLite takes parameters in one statement.
    with connection.cursor() as cursor:
        for start in range(0, len(ids), RAW_TEXT_CHUNK):
            chunk = ids[start : start + RAW_TEXT_CHUNK]
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(f"SELECT {key}, {column} FROM {table} WHERE {key} IN ({marks})", chunk)
            pairs += cursor.fetchall()
    return texts | {pk: text_compared(text or "") for pk, text in pairs}


class _Literals:
    """Verbatim matches of the query's literal parts (identifiers, quoted phrases, CJK runs).

    Common literals make the trigram index slow (every row of a 100k store may share "whale-listen"'s
    trigrams), so a row is first a *provisional* match when its document holds every term of the
    literal, found through the word postings; only rows that can reach the result are then checked
    verbatim against their text. Literals without word terms go through the trigram index.

    A literal found in more than COMMON_LITERAL_SHARE of the eligible rows (a quoted speaker name
    in a transcript, present in half the turns) tells no row apart and is dropped.
    """

    def __init__(self, index: SearchIndex, query: str, eligible: np.ndarray, scope_ids) -> None:
        self.index = index
        self.literals: list[str] = []
        # As the raw texts are compared (text_compared).
        self.folded: list[str] = []
        self.masks: list[np.ndarray] = []
        self.checked = np.zeros(index.table.size, dtype=bool)
        common = max(COMMON_LITERAL_MIN_ROWS, COMMON_LITERAL_SHARE * int(eligible.sum()))
        for literal in query_literals(query):
            terms = set(text_terms(literal))
            if terms:
                mask = eligible.copy()
                for term in terms:
                    mask &= index.literal_mask(term)
            else:
                mask = np.zeros(index.table.size, dtype=bool)
                held = index.held_literals
                found = (
                    held[literal]
                    if held is not None and literal in held
                    else _literal_trigram_ids(index.kind, literal, scope_ids)
                )
                rows = [index.row_of[pk] for pk in found if pk in index.row_of]
                mask[rows] = True
                mask &= eligible
            if mask.sum() > common:
                continue
            self.literals.append(literal)
            self.folded.append(text_compared(literal))
            self.masks.append(mask)

    def share(self) -> np.ndarray:
        """Per row: the share of the literals it (provisionally) contains."""
        share = np.zeros(self.index.table.size, dtype=np.float32)
        for mask in self.masks:
            share += mask
        return share / len(self.literals) if self.literals else share

    def unverified(self, rows: np.ndarray) -> np.ndarray:
        """Those of `rows` whose provisional matches have not been checked verbatim yet."""
        if not self.literals or not len(rows):
            return rows[:0]
        provisional = np.zeros(len(rows), dtype=bool)
        for mask in self.masks:
            provisional |= mask[rows]
        return rows[provisional & ~self.checked[rows]]

    def verify(self, rows: np.ndarray) -> None:
        """Check these rows verbatim, withdrawing the provisional matches their text lacks."""
        if not len(rows):
            return
        ids = self.index.table["id"][rows].tolist()
        texts = _raw_texts(self.index, ids)
        for row, pk in zip(rows, ids, strict=True):
            text = texts.get(pk, "")
            for folded, mask in zip(self.folded, self.masks, strict=True):
                if mask[row] and folded not in text:
                    mask[row] = False
            self.checked[row] = True

    def found(self, row: int) -> list[str]:
        return [
            literal for literal, mask in zip(self.literals, self.masks, strict=True) if mask[row]
        ]


# A pool this many times larger than the rows taken from it is first cut at a sampled threshold.
SAMPLED_CUT_RATIO = 16
SAMPLED_CUT_SAMPLE = 4096


def _exact_low(
    index: SearchIndex,
    vector: np.ndarray,
    approximate: np.ndarray,
    eligible: np.ndarray,
    noise_floor: float,
) -> float:
    """The bottom of the cosine scale, min(the eligible rows' least cosine, the noise floor), after
    a projected scan: read off the exact cosines of the PROJECTION_SHORTLIST rows of least
    approximate cosine, which hold the least exact one nearly always (8 of `bench search`'s 10
    queries at 100k; the others' scores within 0.003). When none of those lies under the noise
    floor, every eligible row's exact cosine decides, as in the exact scan."""
    rows = np.flatnonzero(eligible)
    if not len(rows):
        return noise_floor
    lowest = _best_rows(rows, -approximate[rows], PROJECTION_SHORTLIST)
    least = float(index.exact_cosines(vector, lowest).min())
    if least >= noise_floor:
        least = float(index.exact_cosines(vector, rows).min())
    return min(least, noise_floor)


def _best_rows(at: np.ndarray, score: np.ndarray, take: int) -> np.ndarray:
    """The `take` rows of `at` with the highest `score`, best first; equal scores in row order."""
    take = min(take, len(at))
    if len(at) > SAMPLED_CUT_RATIO * take:
        # Partitioning 100k scores costs about 1 ms; comparing them with one threshold a tenth of
        # that. The threshold is the score about 4·take rows down, read off an evenly strided
        # sample; when fewer than `take` rows reach it, the full partition below decides.
        sample = score[:: max(1, len(score) // SAMPLED_CUT_SAMPLE)]
        rank = min(len(sample) - 1, (4 * take * len(sample)) // len(score))
        threshold = np.partition(sample, len(sample) - 1 - rank)[len(sample) - 1 - rank]
        kept = score >= threshold
        if np.count_nonzero(kept) >= take:
            at, score = at[kept], score[kept]
    top = np.argpartition(-score, take - 1)[:take]
    return at[top[np.lexsort((at[top], -score[top]))]]


def _check_common(query: str, scope_ids: list[int], limit: int) -> str:
    if not isinstance(query, str):
        raise InvalidInput("query must be text", field="query")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be an integer from 1 to {MAX_LIMIT}", field="limit")
    if scope_ids is None or not all(
        isinstance(pk, int) and not isinstance(pk, bool) for pk in scope_ids
    ):
        raise InvalidInput("scope_ids must be a list of scope ids", field="scope_ids")
    # Only so much of a text is word-indexed; of a longer query (a whole conversation) the head
    # and the latest turns count, not the head alone. A lone surrogate would fail the embedding.
    return text_bounded(text_well_formed(query.strip()), limit=INDEXED_TEXT_MAX_CHARS)


def _rank(
    *,
    index: SearchIndex,
    query: str,
    terms: list[str],
    eligible: np.ndarray,
    stats_rows: np.ndarray,
    scope_ids: list[int],
    limit: int,
    lexical: bool,
    semantic: bool,
    floor: float,
    semantic_weight: float,
    priors: Callable[[np.ndarray], np.ndarray] | None,
    vector: np.ndarray | None,
    calibration: Calibration,
    min_cosine: float | None = None,
    excluded: np.ndarray | None = None,
    reply_share: float = 0.0,
) -> list[tuple[int, float, float, float | None, dict]]:
    """(row, score, bm25, cosine, why) for the best `limit` eligible rows, in score order. `terms`
    are the query's resolved lexical terms (empty when lexical is off); `vector` is its embedding
    (None: keyword only); with `min_cosine`, only rows that match a word of the query or whose
    cosine reaches it compete, and rows
    `excluded` (a mask) do not compete, so the limit stays full, on the scales of every eligible
    row. With `reply_share` (turns), a turn that replies to another person's question
    gains that share of the question's score, when the question is among the best
    REPLY_QUESTIONS (TIDELINE_SEARCH_REPLY_SHARE).

    Exact by construction: a provisional literal match can only be withdrawn, which only lowers a
    score (a reply's too, through its question's), so provisional scores are upper bounds. Rows
    are verified until the best `limit` by current score, and the questions they reply to, are
    all verified; every other row's true score is then at most its bound, at most the chosen
    rows' scores.
    """
    if not eligible.any() or not query:
        return []
    bm25 = index.bm25(terms, eligible, stats_rows)
    literals = _Literals(index, query, eligible, scope_ids) if lexical else None
    keyword_boost = settings.TIDELINE_SEARCH_KEYWORD_BOOST * min(
        1.0, LITERAL_FULL_TERMS / max(1, len(dict.fromkeys(terms)))
    )
    cosine = None
    approximate = False
    weight = semantic_weight if semantic else 0.0
    vector = vector if semantic else None
    has_vector = index.table["has_vector"]
    if vector is not None and (eligible & has_vector).any():
        with _blas_one_thread():
            cosine, approximate = index.cosines(vector)
        cosine = np.where(has_vector, cosine, np.float32(-1.0))
    if min_cosine is not None and cosine is None:
        return []
    lexical_hit = bm25 > 0
    if literals is not None:
        for mask in literals.masks:
            lexical_hit |= mask
    if cosine is None:
        candidate = eligible & lexical_hit
        lexical_weight = 1.0
    else:
        if not terms:
            # A query with no word to search by ("?!", only stop words, emoji) has only its cosine,
            # and a vector of punctuation is close to nothing: under the model's noise floor the
            # cosine scale would still stretch the least unrelated row to a full semantic share.
            # (Turns otherwise keep no floor: a question with words fills its top k by meaning.)
            floor = max(floor, calibration.noise_floor)
        candidate = eligible & (lexical_hit | (cosine >= floor))
        lexical_weight = 1.0 - weight if lexical else 0.0
    rows = np.flatnonzero(candidate)
    if not len(rows):
        return []
    lexical_scale = max(
        float(bm25[rows].max()),
        calibration.lexical_floor_share * index.ideal_bm25(terms, stats_rows),
    )
    low = high = 0.0
    if cosine is not None:
        eligible_cos = cosine[eligible & has_vector]
        # The scale starts no higher than the model's noise floor: when only a few rows are
        # eligible (a small store) their own minimum would turn a 0.01 difference in cosine into
        # the whole semantic share.
        low = min(float(eligible_cos.min()), calibration.noise_floor)
        high = float(eligible_cos.max())
    # Only the competitors change, never the scales: rows under `min_cosine` that match no word,
    # and rows a session has already been shown, still set the BM25 and cosine scales, so the
    # rows kept score as the unfiltered ranking scores them (T1 shows what search ranks first
    # among unseen rows). Narrowing first re-read a kept row's cosine against a scale
    # starting at the floor and cost the per-turn block 2 points of LoCoMo R@5 against search.
    # After a projected scan the shortlist is drawn as for search and `candidates` applies the
    # least cosine to its exact cosines.
    if excluded is not None:
        rows = rows[~excluded[rows]]
    if min_cosine is not None and not approximate:
        rows = rows[lexical_hit[rows] | (cosine[rows] >= min_cosine)]
    if not len(rows):
        return []

    # The lexical and prior parts of a row never change during one ranking: computed once for
    # every candidate, then gathered, instead of recomputed over 100k rows on each pass.
    lexical_part = np.zeros(index.table.size, dtype=np.float32)
    if lexical_scale > 0:
        lexical_part[rows] = lexical_weight * bm25[rows] / lexical_scale
    prior_part = np.zeros(index.table.size, dtype=np.float32)
    if priors is not None:
        prior_part[rows] = priors(rows)
    spread = high - low if cosine is not None and high > low else 0.0

    def semantic_part(at: np.ndarray) -> np.ndarray:
        if not spread:
            return np.zeros(len(at), dtype=np.float32)
        return weight * np.clip((cosine[at] - low) / spread, 0.0, 1.0)

    keyword = keyword_boost * literals.share() if literals and literals.literals else None
    question_of = None

    def own_parts(at: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "lexical": lexical_part[at],
            "semantic": semantic_part(at),
            "keyword": keyword[at] if keyword is not None else np.zeros(len(at), np.float32),
            "priors": prior_part[at],
        }

    def own_score(part: dict[str, np.ndarray]) -> np.ndarray:
        # In the order the parts are listed, so a score is the same sum however it is reached.
        return ((part["lexical"] + part["semantic"]) + part["keyword"]) + part["priors"]

    def parts(at: np.ndarray) -> dict[str, np.ndarray]:
        part = own_parts(at)
        if question_of is not None:
            # The question's own score, never its reply share: a lift does not chain.
            question = question_of[at]
            asked = question >= 0
            reply = np.zeros(len(at), dtype=np.float32)
            reply[asked] = np.float32(reply_share) * own_score(own_parts(question[asked]))
            part["reply"] = reply
        return part

    def fused(at: np.ndarray) -> np.ndarray:
        part = parts(at)
        score = own_score(part)
        return score + part["reply"] if "reply" in part else score

    def candidates(at: np.ndarray) -> np.ndarray:
        """Rows still matching after withdrawals: a keyword hit, or similarity above the floor."""
        worded = bm25[at] > 0
        for mask in literals.masks if literals is not None else []:
            worded |= mask[at]
        keep = worded.copy()
        if cosine is not None:
            keep |= cosine[at] >= floor
        if min_cosine is not None:
            keep &= worded | (cosine[at] >= min_cosine)
        return at[keep]

    pool = rows
    if approximate:
        # The projected scan picks the shortlist; exact cosines then decide inside it: the floor
        # and the top of the scale too, as in the exact scan. A scale topped by the best
        # approximate cosine clipped every row whose exact cosine lies above it to the same full
        # semantic share, and the best rows then tied.
        pool = _best_rows(rows, fused(rows), PROJECTION_SHORTLIST)
        with _blas_one_thread():
            cosine[pool] = index.exact_cosines(vector, pool)
            low = _exact_low(index, vector, cosine, eligible & has_vector, calibration.noise_floor)
        pool = candidates(pool)
        if not len(pool):
            return []
        with_vector = pool[has_vector[pool]]
        if len(with_vector):
            high = float(cosine[with_vector].max())
        spread = high - low if high > low else 0.0
    if reply_share:
        # Only the best REPLY_QUESTIONS questions by the parts verification never changes lend a
        # share: one far down the list is not about the query (lending from every candidate
        # cost LoCoMo 0.2 of R@10). Their scores can only fall, so bounds stay bounds.
        steady = lexical_part[pool] + semantic_part(pool) + prior_part[pool]
        question_of = np.full(index.table.size, -1, dtype=np.int64)
        question_of[pool] = index.questions_before(pool, _best_rows(pool, steady, REPLY_QUESTIONS))
    batch = limit
    while True:
        chosen = _best_rows(pool, fused(pool), limit)
        # A reply's score holds its question's, so the question's literals are verified too.
        questions = question_of[chosen] if question_of is not None else chosen[:0]
        scored = np.concatenate([chosen, questions[questions >= 0]])
        pending = literals.unverified(scored) if literals is not None else chosen[:0]
        if not len(pending):
            break
        # Verify the next rows by bound in one batch, growing, so a store full of provisional
        # matches costs a few reads, not one per row.
        batch *= 2
        ahead = _best_rows(pool, fused(pool), min(len(pool), limit + batch))
        literals.verify(np.union1d(literals.unverified(ahead), pending))
        keyword = keyword_boost * literals.share()
        pool = candidates(pool)
        if not len(pool):
            return []
    components = parts(chosen)
    final = fused(chosen)
    matched = index.matched_terms(terms, chosen)
    results = []
    for position, row in enumerate(chosen):
        cos = float(cosine[row]) if cosine is not None and has_vector[row] else None
        why = {
            "matched_terms": matched[position],
            "literal_matches": literals.found(row) if literals else [],
            "lexical_score": round(float(bm25[row]), 4),
            "lexical_share": round(float(components["lexical"][position]), 4),
            "cosine": round(cos, 4) if cos is not None else None,
            "semantic_share": round(float(components["semantic"][position]), 4),
            "boosts": {
                name: round(float(components[name][position]), 4)
                for name in ("keyword", "priors", "reply")
                if name in components
            },
            "score": round(float(final[position]), 4),
        }
        results.append((row, float(final[position]), float(bm25[row]), cos, why))
    return results


def _memory_rank(
    *,
    index: SearchIndex,
    query: str,
    scope_ids: list[int],
    limit: int,
    as_of: datetime | None,
    since: datetime | None,
    until: datetime | None,
    memory_types: list[str] | None,
    layers: list[str] | None,
    tags: list[str] | None,
    statuses: list[str] | None,
    min_semantic: float | None,
    lexical: bool,
    semantic: bool,
    exclude_ids: set[int],
    exclude_secret: bool,
    withheld: set[int],
    vector: np.ndarray | None,
    calibration: Calibration,
    asked_at: datetime | None,
) -> tuple[list, list[int], dict[int, str]]:
    with index.lock:
        table = index.table
        in_scope = table["alive"] & _among(table["scope"], scope_ids)
        eligible = in_scope.copy()
        # "Yesterday" in a search of the past (as of a moment, or up to one) is the day before it.
        asked_at = asked_at or as_of or until or timezone.now()
        moment = (as_of or timezone.now()).timestamp()
        wanted = statuses or (AS_OF_STATUSES if as_of else DEFAULT_STATUSES)
        eligible &= _among(table["status"], [STATUS_CODES[s] for s in wanted])
        if statuses is None or as_of is not None:
            eligible &= (table["valid_from"] <= moment) & (table["valid_to"] > moment)
        if as_of is not None:
            # An edited narrative keeps when it happened, so its old telling is still "valid" then:
            # the past is told as it is known now, once.
            eligible &= ~table["corrected"]
        if since is not None:
            eligible &= table["valid_from"] >= since.timestamp()
        if until is not None:
            eligible &= table["valid_from"] < until.timestamp()
        if memory_types:
            eligible &= _among(table["memory_type"], [TYPE_CODES[t] for t in memory_types])
        if layers:
            eligible &= _among(table["layer"], [LAYER_CODES[layer] for layer in layers])
        # What the caller may see sets the BM25 statistics: a secret's words counted in them would
        # move a plain key's scores with what the secret says (ask "x hunter2", compare with "x").
        visible = in_scope
        if exclude_secret:
            visible = in_scope & ~table["secret"]
            # Secrets the index does not know of yet, found when the rows were loaded.
            visible[[index.row_of[pk] for pk in withheld if pk in index.row_of]] = False
            eligible &= visible
        excluded = None
        if exclude_ids:
            excluded = np.zeros(table.size, dtype=bool)
            excluded[[index.row_of[pk] for pk in exclude_ids if pk in index.row_of]] = True
        if tags:
            tagged = NarrativeTag.objects.filter(
                tag__in=[tag.strip().lower() for tag in tags]
            ).values_list("narrative_id", flat=True)
            rows = [index.row_of[pk] for pk in set(tagged) if pk in index.row_of]
            mask = np.zeros(table.size, dtype=bool)
            mask[rows] = True
            eligible &= mask
        now = time.time()
        decision_prior = (
            settings.TIDELINE_SEARCH_PRIOR_DECISION if asks_about_choice(query) else 0.0
        )
        # When it happened and the kind of answer asked for, as in turn search
        # (memory/search/turn_priors.py): a memory happened at its valid_from.
        timed = time_priors(
            query=query,
            asked_at=asked_at,
            occurred_at=table["valid_from"],
            mentions=table["mentions_time"],
        )
        answered = answer_priors(
            query=query, number_flags=table["states_number"], name_flags=table["names_proper"]
        )

        def priors(rows: np.ndarray) -> np.ndarray:
            # In place on one float64 buffer: over 100k candidates the temporaries cost more than
            # the arithmetic. Same operations, same order: w·weight + p·pinned + r·2^(-age/half-life).
            recency = table["recorded_at"][rows]
            np.subtract(now, recency, out=recency)
            recency /= 86400.0
            np.maximum(recency, 0.0, out=recency)
            np.negative(recency, out=recency)
            recency /= RECENCY_HALF_LIFE_DAYS
            np.exp2(recency, out=recency)
            recency *= settings.TIDELINE_SEARCH_PRIOR_RECENCY
            total = (
                settings.TIDELINE_SEARCH_PRIOR_WEIGHT * table["weight"][rows]
                + settings.TIDELINE_SEARCH_PRIOR_PINNED * table["pinned"][rows]
            )
            total += recency
            if decision_prior:
                total += decision_prior * (table["layer"][rows] == DECISION_LAYER)
            if answered is not None:
                total += answered(rows)
            if timed is not None:
                total += timed(rows)
            return total.astype(np.float32)

        ranked = _rank(
            index=index,
            query=query,
            terms=(
                index.terms_resolve(text_terms(query), scope_ids=scope_ids, stats_rows=visible)
                if lexical
                else []
            ),
            eligible=eligible,
            stats_rows=visible,
            scope_ids=scope_ids,
            limit=limit,
            lexical=lexical,
            semantic=semantic,
            floor=calibration.semantic_floor,
            semantic_weight=calibration.semantic_weight,
            priors=priors,
            vector=vector,
            calibration=calibration,
            min_cosine=min_semantic,
            excluded=excluded,
        )
        ids = [int(table["id"][row]) for row, *_ in ranked]
        kinds = {
            int(table["id"][row]): TYPE_NAMES[int(table["memory_type"][row])] for row, *_ in ranked
        }
    return ranked, ids, kinds


def memory_search(
    *,
    query: str,
    scope_ids: list[int],
    limit: int = 10,
    as_of: datetime | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    memory_types: list[str] | None = None,
    layers: list[str] | None = None,
    tags: list[str] | None = None,
    statuses: list[str] | None = None,
    min_semantic: float | None = None,
    lexical: bool = True,
    semantic: bool = True,
    activation_source: str | None = None,
    session_id: int | None = None,
    exclude_ids: set[int] | frozenset[int] = frozenset(),
    exclude_secret: bool = False,
    asked_at: datetime | None = None,
) -> list[MemoryHit]:
    """Memories in `scope_ids` that match `query`, best first, each saying why it matched.

    Default: active memories valid now. With `as_of`, what was valid at that moment (superseded and
    expired rows included when they were valid then). `since`/`until` bound the event time
    (valid_from). Days named relative to the moment of asking ("yesterday", 上周) are read from
    `asked_at`, else `as_of`, else `until`, else now. `min_semantic` keeps only hits that match a
    word of the query or whose cosine reaches it (semantic prefetch, e.g. the model's noise floor),
    and the limit is filled from those, each scored as the search without it scores it; `lexical=False` /
    `semantic=False` switch a side off. `exclude_secret` drops secret memories inside the ranking,
    so the limit stays full of non-secret ones. `exclude_ids` (a session's already-seen memories)
    do not compete but still set the scales, so the rest score as without them, and only returned
    rows are loaded. With `activation_source`, each returned memory counts an activation and gets
    an AttentionEvent, in one short transaction after ranking.
    """
    query = _check_common(query, scope_ids, limit)
    if statuses is not None and not set(statuses) <= set(MemoryStatus.values):
        raise InvalidInput(f"statuses must be among {MemoryStatus.values}", field="statuses")
    if memory_types is not None and not set(memory_types) <= set(MemoryType.values):
        raise InvalidInput(f"memory_types must be among {MemoryType.values}", field="memory_types")
    if layers is not None and not set(layers) <= set(LAYER_CODES):
        raise InvalidInput(f"layers must be among {list(LAYER_CODES)}", field="layers")
    if not scope_ids or not query:
        return []
    started = time.perf_counter()
    index = search_index("memory")
    calibration = calibration_get(index.model_id)
    # Embedding the query is the slowest step; it runs before taking the index lock.
    vector = _query_vector(query, index) if semantic else None
    index = index.narrow(
        query=query, scope_ids=scope_ids, vector=vector, exclude_secret=exclude_secret
    )
    withheld: set[int] = set()
    while True:
        ranked, ids, kinds = _memory_rank(
            index=index,
            query=query,
            scope_ids=scope_ids,
            limit=limit,
            as_of=as_of,
            since=since,
            until=until,
            memory_types=memory_types,
            layers=layers,
            tags=tags,
            statuses=statuses,
            min_semantic=min_semantic,
            lexical=lexical,
            semantic=semantic,
            exclude_ids=set(exclude_ids),
            exclude_secret=exclude_secret,
            withheld=withheld,
            vector=vector,
            calibration=calibration,
            asked_at=asked_at,
        )
        memories = _memories_typed(kinds)
        # The index may lag a secret flag set a moment ago; the loaded row is the truth.
        leaked = {pk for pk, memory in memories.items() if exclude_secret and memory.secret}
        if not leaked:
            break
        withheld |= leaked
    labels = _scope_labels(index, scope_ids)
    hits = []
    for (_, score, bm25, cosine, why), pk in zip(ranked, ids, strict=True):
        memory = memories.get(pk)
        if memory is None:
            continue
        why["scope"] = labels.get(memory.scope_id, str(memory.scope_id))
        hits.append(MemoryHit(memory=memory, score=score, lexical=bm25, semantic=cosine, why=why))
    logger.debug(
        "memory_search %d hits in %.1f ms", len(hits), (time.perf_counter() - started) * 1e3
    )
    if activation_source and hits:
        from memory.services.attention import memories_activate

        memories_activate(
            memory_ids=[hit.memory.pk for hit in hits],
            source=activation_source,
            session_id=session_id,
            similarities=[hit.semantic for hit in hits],
        )
    return hits


def _scope_labels(index: SearchIndex, scope_ids: list[int]) -> dict[int, str]:
    if index.held_labels is not None:
        return index.held_labels
    return dict(Scope.objects.filter(pk__in=scope_ids).order_by().values_list("pk", "label"))


def _memories_typed(kinds: dict[int, str]) -> dict[int, Memory]:
    """The typed rows (Narrative, Fact, SelfConcept) for {id: memory type}."""
    found: dict[int, Memory] = {}
    for model, kind in (
        (Narrative, MemoryType.NARRATIVE),
        (Fact, MemoryType.FACT),
        (SelfConcept, MemoryType.SELF_CONCEPT),
    ):
        wanted = [pk for pk, memory_type in kinds.items() if memory_type == kind]
        if wanted:
            rows = model.objects.filter(pk__in=wanted).defer("embedding").order_by()
            found.update({row.pk: row for row in rows})
    return found


def turns_open(*, query: str, scope_ids: list[int], expand: bool = False):
    """The turn index as `query` ranks it (narrowed on PostgreSQL), the embedder's calibration,
    the query's vector and, with `expand`, its expansion candidates (memory/search/expansion.py;
    the narrowed view then holds their postings too): what turn_search and session_search start
    from."""
    from memory.services.embedding import embedder_get

    index = search_index("turn")
    calibration = calibration_get(index.model_id)
    vector = _query_vector(query, index)
    candidates = {}
    if expand and vector is not None:
        candidates = expansion_candidates(
            query=query, embedder=embedder_get(), dim=index.dim, calibration=calibration
        )
    extra = sorted({word for words in candidates.values() for word in words})
    narrowed = index.narrow(query=query, scope_ids=scope_ids, vector=vector, extra_terms=extra)
    return narrowed, calibration, vector, candidates


def turns_within(
    table, mask: np.ndarray, *, since: datetime | None, until: datetime | None
) -> np.ndarray:
    """A copy of `mask` keeping the turns that happened in [since, until)."""
    within = mask.copy()
    if since is not None:
        within &= table["occurred_at"] >= since.timestamp()
    if until is not None:
        within &= table["occurred_at"] < until.timestamp()
    return within


def turn_search(
    *,
    query: str,
    scope_ids: list[int],
    limit: int = 10,
    since: datetime | None = None,
    until: datetime | None = None,
    session_ids: list[int] | None = None,
    asked_at: datetime | None = None,
) -> list[TurnHit]:
    """Raw conversation turns in `scope_ids` that match `query`, best first, each saying why.
    `since`/`until` bound when the turn happened (occurred_at); days named relative to the moment
    of asking ("yesterday", 上周) are read from `asked_at`, else `until`, else now."""
    query = _check_common(query, scope_ids, limit)
    if not scope_ids or not query:
        return []
    index, calibration, vector, candidates = turns_open(
        query=query, scope_ids=scope_ids, expand=True
    )
    with index.lock:
        table = index.table
        in_scope = table["alive"] & _among(table["scope"], scope_ids)
        eligible = turns_within(table, in_scope, since=since, until=until)
        if session_ids is not None:
            eligible &= np.isin(table["session"], np.asarray(session_ids, dtype=np.int64))

        terms = index.terms_resolve(text_terms(query), scope_ids=scope_ids, stats_rows=in_scope)
        expansions = expansion_choose(
            index=index,
            candidates=candidates,
            terms=terms,
            stats_rows=in_scope,
            speakers=index.speakers_in(scope_ids),
        )
        ranked = _rank(
            index=index,
            query=query,
            terms=terms,
            eligible=eligible,
            stats_rows=in_scope,
            scope_ids=scope_ids,
            limit=limit,
            lexical=True,
            semantic=True,
            floor=calibration.turn_floor,
            semantic_weight=calibration.turn_semantic_weight,
            priors=turn_priors(
                index=index,
                query=query,
                terms=terms,
                expansions=expansions,
                eligible=eligible,
                stats_rows=in_scope,
                asked_at=asked_at or until or timezone.now(),
            ),
            vector=vector,
            calibration=calibration,
            reply_share=settings.TIDELINE_SEARCH_REPLY_SHARE,
        )
        ids = [int(table["id"][row]) for row, *_ in ranked]
    turns = {
        turn.pk: turn
        for turn in ContextTurn.objects.filter(pk__in=ids).defer("embedding").order_by()
    }
    labels = _scope_labels(index, scope_ids)
    hits = []
    for (_, score, bm25, cosine, why), pk in zip(ranked, ids, strict=True):
        turn = turns.get(pk)
        if turn is None:
            continue
        why["scope"] = labels.get(turn.scope_id, str(turn.scope_id))
        why["expansions"] = expansions
        hits.append(TurnHit(turn=turn, score=score, lexical=bm25, semantic=cosine, why=why))
    return hits
