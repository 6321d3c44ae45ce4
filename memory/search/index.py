"""The per-process search index: BM25 postings, a float32 vector matrix and the filter columns of
every memory (or turn), refreshed incrementally from the change log the database triggers write.

Rows are append-only inside the index: a changed memory gets a new row and its old row is marked
dead, so postings lists only ever grow and never need rewriting; when more than half the rows are
dead the index rebuilds itself. A query reads the change log past the last sequence number it saw
(one indexed lookup when nothing changed), so no query ever reloads the whole store.
"""

import logging
import math
import threading
from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from django.conf import settings
from django.db import connection

from memory.models import ContextTurn, Memory, MemoryStatus, MemoryType, NarrativeLayer
from memory.search import schema
from memory.search.intent import ends_asking, names_proper, states_number
from memory.search.text import date_terms, text_terms
from memory.search.timing import mentions_time
from memory.services.weights import salience

logger = logging.getLogger("tideline.search")

STATUS_CODES = {status: code for code, status in enumerate(MemoryStatus.values)}
TYPE_CODES = {kind: code for code, kind in enumerate(MemoryType.values)}
LAYER_CODES = {layer: code for code, layer in enumerate(NarrativeLayer.values)}
NO_TIME = math.inf
REFRESH_CHUNK = 2000
PROJECTION_SAMPLE = 20_000
# Rows re-scored with exact cosines after a projected scan.
PROJECTION_SHORTLIST = 500


def epoch(moment: datetime | None, default: float = NO_TIME) -> float:
    return moment.timestamp() if moment is not None else default


class _Columns:
    """Growable numpy columns sharing one row numbering."""

    def __init__(self, spec: dict[str, np.dtype], dim: int) -> None:
        self.spec = spec
        self.size = 0
        self.capacity = 0
        self.dim = dim
        self.data: dict[str, np.ndarray] = {}
        self.vectors = np.zeros((0, dim), dtype=np.float32)
        self._grow(1024)

    def _grow(self, capacity: int) -> None:
        for name, dtype in self.spec.items():
            column = np.zeros(capacity, dtype=dtype)
            if name in self.data:
                column[: self.size] = self.data[name][: self.size]
            self.data[name] = column
        vectors = np.zeros((capacity, self.dim), dtype=np.float32)
        vectors[: self.size] = self.vectors[: self.size]
        self.vectors = vectors
        self.capacity = capacity

    def append(self, values: dict, vector: np.ndarray | None) -> int:
        if self.size == self.capacity:
            self._grow(self.capacity * 2)
        row = self.size
        for name, value in values.items():
            self.data[name][row] = value
        if vector is not None and vector.shape[0] == self.dim:
            self.vectors[row] = vector
            self.data["has_vector"][row] = True
        self.size += 1
        return row

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name][: self.size]


class Postings:
    """term → rows and (fractional) term frequencies, appended as rows are added."""

    def __init__(self) -> None:
        self._lists: dict[str, tuple[Sequence[int], Sequence[float]]] = defaultdict(
            lambda: ([], [])
        )
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def add(self, row: int, bag: dict[str, float]) -> None:
        for term, tf in bag.items():
            rows, tfs = self._lists[term]
            rows.append(row)
            tfs.append(tf)

    def assign(self, term: str, rows: np.ndarray, tfs: np.ndarray) -> None:
        """A term's whole posting list at once, as arrays (a per-query view's, which never grows)."""
        self._lists[term] = (rows, tfs)
        self._arrays[term] = (rows, tfs)

    def get(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        listed = self._lists.get(term)
        if listed is None:
            return None
        cached = self._arrays.get(term)
        if cached is None or len(cached[0]) != len(listed[0]):
            cached = (
                np.asarray(listed[0], dtype=np.int64),
                np.asarray(listed[1], dtype=np.float32),
            )
            self._arrays[term] = cached
        return cached


class SearchIndex(ABC):
    """Everything one kind of document (memories or turns) needs to be ranked without SQL."""

    kind = ""
    documents_hold_neighbours = False
    # The setting holding BM25's length normalisation b for this kind of document.
    bm25_b_setting = "TIDELINE_SEARCH_BM25_B"
    model = Memory
    word_table = ""
    columns: dict[str, np.dtype] = {}
    # What a per-query view fetched along with its rows, so ranking reads no more of the database
    # (None: ask the database): rows holding each term-less literal, the NFKC-casefolded raw text
    # of the rows a literal may match, and the scope labels.
    held_literals: dict[str, set[int]] | None = None
    held_texts: dict[int, str] | None = None
    held_labels: dict[int, str] | None = None

    def __init__(self, *, model_id: str | None, dim: int) -> None:
        self.model_id = model_id
        self.dim = dim
        self.lock = threading.RLock()
        self.last_seq = 0
        self.last_token: int | None = None
        self.loaded = False
        self._reset()

    def _reset(self) -> None:
        base = {"id": np.int64, "alive": np.bool_, "scope": np.int64, "length": np.float32}
        base["has_vector"] = np.bool_
        self.table = _Columns({**base, **self.columns}, self.dim)
        self.postings = Postings()
        # Terms of each row's own text (turn documents also hold their neighbours' terms): what a
        # literal must be found in.
        self.own_postings = Postings()
        self.row_of: dict[int, int] = {}
        # The terms of every speaker's name, by the scope of the turns they spoke. Only grows: a turn
        # moved to another scope leaves its speaker's name in the old one too.
        self.scope_speakers: dict[int, set[str]] = {}
        self.dead = 0
        self.basis: np.ndarray | None = None
        self.projected = np.zeros((0, 0), dtype=np.float32)
        self.projected_size = 0

    # --- refresh -------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Bring the index up to the change log's tip. Cheap when nothing changed: one statement
        reads the token of the last row applied, the tip and the tip's token."""
        with self.lock, connection.cursor() as cursor:
            cursor.execute(
                f"SELECT (SELECT token FROM {schema.CHANGE_TABLE} WHERE seq = %s), tip, "
                f"(SELECT token FROM {schema.CHANGE_TABLE} WHERE seq = tip) "
                f"FROM (SELECT max(seq) AS tip FROM {schema.CHANGE_TABLE}) AS log",
                [self.last_seq],
            )
            last_token, tip, tip_token = cursor.fetchone()
            tip = tip or 0
            if self.loaded and self.last_seq:
                # The log was rolled back underneath us (or recreated): start over.
                self.loaded = last_token is not None and last_token == self.last_token
            if not self.loaded:
                self._reset()
                self._load_all()
                self.loaded = True
                self._advance(tip, tip_token)
                return
            if tip > self.last_seq:
                cursor.execute(
                    f"SELECT seq, row_id FROM {schema.CHANGE_TABLE} WHERE seq > %s AND seq <= %s "
                    "AND kind = %s ORDER BY seq",
                    [self.last_seq, tip, self.kind],
                )
                ids = list(dict.fromkeys(row_id for _, row_id in cursor.fetchall()))
                for start in range(0, len(ids), REFRESH_CHUNK):
                    self._load(ids[start : start + REFRESH_CHUNK])
                if self.dead > 1000 and self.dead > self.table.size // 2:
                    self._reset()
                    self._load_all()
            self._advance(tip, tip_token)

    def _advance(self, tip: int, token: int | None) -> None:
        self.last_seq = tip
        self.last_token = token if tip else None

    def _load_all(self) -> None:
        ids = list(self.model.objects.order_by("pk").values_list("pk", flat=True))
        for start in range(0, len(ids), REFRESH_CHUNK):
            self._load(ids[start : start + REFRESH_CHUNK])

    def _stored_terms(self, ids: list[int], texts: dict[int, str]) -> dict[int, list[str]]:
        """Terms per row: read from the FTS5 word index where there is one (no re-segmentation),
        computed in Python otherwise."""
        if connection.vendor == "sqlite" and ids:
            with connection.cursor() as cursor:
                marks = ",".join(["%s"] * len(ids))
                cursor.execute(
                    f"SELECT rowid, tokens FROM {self.word_table} WHERE rowid IN ({marks})", ids
                )
                return {pk: (tokens or "").split() for pk, tokens in cursor.fetchall()}
        return {pk: text_terms(texts.get(pk, "")) for pk in ids}

    def row_vectors(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of `rows`, zeros where a row has none in this index's model."""
        vectors = self.table.vectors[rows].copy()
        vectors[~self.table["has_vector"][rows]] = 0.0
        return vectors

    def _kill(self, pk: int) -> None:
        row = self.row_of.pop(pk, None)
        if row is not None and self.table["alive"][row]:
            self.table.data["alive"][row] = False
            self.dead += 1

    def _vector(self, blob, model_id: str) -> np.ndarray | None:
        """The row's vector, or None when it has none in this index's model. A blob of another
        length (an import let a damaged one in) is none either: read as float32s it would fail
        every search, and `reembed --all` embeds the row again."""
        if not blob or self.model_id is None or model_id != self.model_id:
            return None
        data = bytes(blob)
        if len(data) != self.dim * np.dtype(np.float32).itemsize:
            return None
        return np.frombuffer(data, dtype=np.float32)

    def _add(
        self, pk: int, values: dict, bag: dict[str, float], vector, own: dict | None = None
    ) -> None:
        self._kill(pk)
        values = {**values, "id": pk, "alive": True, "length": sum(bag.values())}
        row = self.table.append(values, vector)
        self.postings.add(row, bag)
        if own is not None:
            self.own_postings.add(row, own)
        self.row_of[pk] = row

    def narrow(
        self,
        *,
        query: str,
        scope_ids: list[int],
        vector,
        extra_terms: Sequence[str] = (),
        exclude_secret: bool = False,
    ) -> "SearchIndex":
        """The rows a query ranks: this whole index (the database-native backend narrows, holding
        the postings of `extra_terms` besides the query's own, and reads its statistics without
        secret memories with `exclude_secret`)."""
        return self

    @abstractmethod
    def _load(self, ids: list[int]) -> None:
        """Read these rows from the database into the table (memories or turns)."""

    # --- ranking helpers -------------------------------------------------------------------------

    def bm25(self, terms: list[str], eligible: np.ndarray, stats_rows: np.ndarray) -> np.ndarray:
        """BM25 (Lucene idf) of every row for `terms`, zero outside `eligible`. Collection
        statistics (N, df, average length) come from `stats_rows`, the caller's visible store."""
        size = self.table.size
        scores = np.zeros(size, dtype=np.float32)
        if not terms or not stats_rows.any():
            return scores
        k1 = settings.TIDELINE_SEARCH_BM25_K1
        b = getattr(settings, self.bm25_b_setting)
        lengths = self.table["length"]
        total = int(stats_rows.sum())
        average = float(lengths[stats_rows].mean()) or 1.0
        # A query term counts once however often the query repeats it: a long dialogue says "feel"
        # ten times without meaning it ten times more; rarity (idf) alone weighs it.
        for term in dict.fromkeys(terms):
            posting = self.postings.get(term)
            if posting is None:
                continue
            rows, tfs = posting
            df = int(stats_rows[rows].sum())
            if df == 0:
                continue
            keep = eligible[rows]
            rows, tfs = rows[keep], tfs[keep]
            if not len(rows):
                continue
            idf = math.log(1 + (total - df + 0.5) / (df + 0.5))
            norm = k1 * (1 - b + b * lengths[rows] / average)
            scores[rows] += idf * tfs * (k1 + 1) / (tfs + norm)
        return scores

    def ideal_bm25(self, terms: list[str], stats_rows: np.ndarray) -> float:
        """The BM25 of a document of average length holding each known query term once: the scale
        a lexical score is read against, so matching only a weak term never counts as a full hit."""
        total = int(stats_rows.sum())
        ideal = 0.0
        for term in dict.fromkeys(terms):
            posting = self.postings.get(term)
            df = int(stats_rows[posting[0]].sum()) if posting is not None else 0
            if df:
                ideal += math.log(1 + (total - df + 0.5) / (df + 0.5))
        return ideal

    def term_mask(self, term: str) -> np.ndarray:
        """Rows whose document contains `term`."""
        mask = np.zeros(self.table.size, dtype=bool)
        posting = self.postings.get(term)
        if posting is not None:
            mask[posting[0]] = True
        return mask

    def speakers_in(self, scope_ids: list[int]) -> set[str]:
        """The terms of the names of everyone who spoke in `scope_ids`."""
        return set().union(*(self.scope_speakers.get(scope_id, ()) for scope_id in scope_ids))

    def terms_resolve(
        self, terms: list[str], *, scope_ids: list[int], stats_rows: np.ndarray
    ) -> list[str]:
        """The query's terms, with a name spelled one letter off a speaker's name (Akib for Aqib)
        read as that name when the caller's visible store (`stats_rows`) has no such word. Only
        the caller's scopes decide: another scope's words and speakers never change a reading."""
        speakers = self.speakers_in(scope_ids)
        if not speakers:
            return terms
        return [
            term
            if len(term) < 4 or self.ideal_bm25([term], stats_rows) > 0
            else next((name for name in sorted(speakers) if _one_edit_apart(term, name)), term)
            for term in terms
        ]

    def literal_mask(self, term: str) -> np.ndarray:
        """Rows whose own text contains `term` (a provisional literal match)."""
        if not self.documents_hold_neighbours:
            return self.term_mask(term)
        mask = np.zeros(self.table.size, dtype=bool)
        posting = self.own_postings.get(term)
        if posting is not None:
            mask[posting[0]] = True
        return mask

    def matched_terms(self, terms: list[str], rows: np.ndarray) -> list[list[str]]:
        matched: list[list[str]] = [[] for _ in rows]
        for term in dict.fromkeys(terms):
            hit = self.term_mask(term)[rows]
            for position in np.flatnonzero(hit):
                matched[position].append(term)
        return matched

    # --- semantic --------------------------------------------------------------------------------

    def cosines(self, vector: np.ndarray) -> tuple[np.ndarray, bool]:
        """Cosine of every row with `vector` (meaningless where has_vector is False), and whether it
        is the projected approximation.

        Scanning the matrix is memory-bound (100k × 512 float32 is 205 MB per query), so past
        TIDELINE_SEARCH_PROJECTION_MIN_ROWS rows the scan runs over the vectors projected on their
        top principal directions (TIDELINE_SEARCH_PROJECTION_DIM), and callers re-score their
        shortlist exactly with `exact_cosines`. The projected matrix is stored one dimension per
        row (dim × rows): BLAS then streams long rows, about 2.5× faster than one short dot
        product per stored row (2.5 against 6.6 ms at 100k × 128, one thread).
        """
        size = self.table.size
        dim = settings.TIDELINE_SEARCH_PROJECTION_DIM
        if not dim or dim >= self.dim or size < settings.TIDELINE_SEARCH_PROJECTION_MIN_ROWS:
            return self.table.vectors[:size] @ vector, False
        self._project(dim)
        return (vector @ self.basis) @ self.projected[:, :size], True

    def exact_cosines(self, vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self.table.vectors[rows] @ vector

    def _project(self, dim: int) -> None:
        size = self.table.size
        if self.basis is None or self.basis.shape[1] != dim:
            rows = np.flatnonzero(self.table["has_vector"])
            if len(rows) > PROJECTION_SAMPLE:
                rows = np.random.default_rng(0).choice(rows, PROJECTION_SAMPLE, replace=False)
            sample = self.table.vectors[rows]
            # Uncentred principal directions: dot products in the projected space approximate the
            # full dot products, which is what cosine over unit vectors needs.
            _, _, right = np.linalg.svd(sample, full_matrices=False)
            self.basis = np.ascontiguousarray(right[:dim].T, dtype=np.float32)
            self.projected = np.zeros((dim, 0), dtype=np.float32)
            self.projected_size = 0
        if self.projected_size < size:
            if self.projected.shape[1] < size:
                grown = np.zeros((dim, self.table.capacity), dtype=np.float32)
                grown[:, : self.projected_size] = self.projected[:, : self.projected_size]
                self.projected = grown
            start = self.projected_size
            self.projected[:, start:size] = (self.table.vectors[start:size] @ self.basis).T
            self.projected_size = size


MEMORY_FIELDS = (
    "pk",
    "scope_id",
    "status",
    "memory_type",
    "valid_from",
    "valid_to",
    "recorded_at",
    "pinned",
    "importance",
    "narrative__weight",
    "narrative__layer",
    "secret",
    "narrative__emotion_intensity",
    "superseded_by__valid_from",
)
MEMORY_COLUMNS = {
    "status": np.int8,
    "memory_type": np.int8,
    "layer": np.int8,
    "valid_from": np.float64,
    "valid_to": np.float64,
    "recorded_at": np.float64,
    "pinned": np.bool_,
    "weight": np.float32,
    "secret": np.bool_,
    "corrected": np.bool_,
    "mentions_time": np.bool_,
    "states_number": np.bool_,
    "names_proper": np.bool_,
}


# Importance is 1–5; dividing puts it on a narrative weight's 0–1 scale.
IMPORTANCE_LEVELS = 5


def memory_weight(*, weight: float | None, importance: int, intensity: float | None) -> float:
    """Narratives carry a computed weight, raised by how strongly they were felt; other kinds use
    their importance on the same 0–1 scale."""
    if weight is None:
        return importance / IMPORTANCE_LEVELS
    return salience(weight=weight, emotion_intensity=intensity or 0)


def memory_weights(
    *, weight: np.ndarray, importance: np.ndarray, intensity: np.ndarray
) -> np.ndarray:
    """memory_weight over whole columns, NaN standing for a missing weight or intensity: a
    per-query view fills hundreds of rows at once, and a Python call per row was a millisecond of
    every PostgreSQL search."""
    felt = salience(weight=weight, emotion_intensity=np.nan_to_num(intensity))
    return np.where(np.isnan(weight), importance / IMPORTANCE_LEVELS, felt)


def answer_flags(text: str, terms: Iterable[str]) -> dict[str, bool]:
    """The kinds of answer a row's own text (`terms`, its terms) can give, for the priors of a
    question that asks when, how many or where (memory/search/intent.py, timing.py)."""
    return {
        "mentions_time": mentions_time(terms),
        "states_number": states_number(text),
        "names_proper": names_proper(text),
    }


def memory_values(row: tuple) -> dict:
    """The filter and prior columns of one memory, from a row of MEMORY_FIELDS."""
    (_, scope_id, status, memory_type, valid_from, valid_to, recorded_at, pinned) = row[:8]
    importance, weight, layer, secret, intensity, successor_from = row[8:]
    return {
        "scope": scope_id,
        "status": STATUS_CODES.get(status, -1),
        "memory_type": TYPE_CODES.get(memory_type, -1),
        "layer": LAYER_CODES.get(layer, -1),
        "valid_from": epoch(valid_from, -NO_TIME),
        "valid_to": epoch(valid_to),
        "recorded_at": epoch(recorded_at, 0.0),
        "pinned": pinned,
        "weight": memory_weight(weight=weight, importance=importance, intensity=intensity),
        "secret": secret,
        "corrected": told_again(valid_from=valid_from, successor_from=successor_from),
    }


def told_again(*, valid_from, successor_from) -> bool:
    """Whether a row was superseded by a new telling of the same moment (an edit keeps when the
    event happened) rather than by a later state of the world: at any past moment, only the last
    telling of it holds."""
    return successor_from is not None and successor_from <= valid_from


class MemoryIndex(SearchIndex):
    kind = "memory"
    model = Memory
    word_table = schema.MEMORY_WORD
    columns = MEMORY_COLUMNS

    def _load(self, ids: list[int]) -> None:
        rows = list(
            Memory.objects.filter(pk__in=ids).values_list(
                *MEMORY_FIELDS, "search_text", "embedding", "embedding_model"
            )
        )
        width = len(MEMORY_FIELDS)
        terms = self._stored_terms([row[0] for row in rows], {row[0]: row[width] for row in rows})
        for row in rows:
            text, blob, model_id = row[width:]
            own = terms.get(row[0], [])
            self._add(
                row[0],
                {**memory_values(row[:width]), **answer_flags(text or "", own)},
                Counter(own),
                self._vector(blob, model_id),
            )


def _one_edit_apart(left: str, right: str) -> bool:
    """One substitution, insertion or deletion apart (never equal)."""
    if left == right or abs(len(left) - len(right)) > 1:
        return False
    if len(left) > len(right):
        left, right = right, left
    for position, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            tail = position + 1
            if len(left) == len(right):
                return left[tail:] == right[tail:]
            return left[position:] == right[tail:]
    return True


# Speakers that are roles, not people: a question that says "the user" or "assist" names nobody.
ROLE_SPEAKERS = frozenset(
    ["user", "assistant", "system", "tool", "agent", "ai", "bot", "human", "model"]
)


class TurnIndex(SearchIndex):
    """Turns are ranked as small windows of conversation: a turn's document holds its own terms, the
    terms of its neighbouring turns in the same session at a lower weight, and the month and year it
    happened, because questions about a conversation name what was said around the answer and when.
    """

    kind = "turn"
    documents_hold_neighbours = True
    bm25_b_setting = "TIDELINE_SEARCH_TURN_BM25_B"
    model = ContextTurn
    word_table = schema.TURN_WORD
    columns = {
        "session": np.int64,
        "seq": np.int64,
        "occurred_at": np.float64,
        "mentions_time": np.bool_,
        "asks": np.bool_,
        "states_number": np.bool_,
        "names_proper": np.bool_,
        "speaker": np.int32,
        "own_terms": np.int32,
    }

    def _reset(self) -> None:
        super()._reset()
        # Who said each turn, as a number into `speaker_names` (the terms of each speaker's name);
        # 0 is no name: an empty speaker or a role (ROLE_SPEAKERS), which a question never names.
        self.speaker_names: list[frozenset[str]] = [frozenset()]
        self.speaker_numbers: dict[str, int] = {}

    def speaker_number(self, speaker: str | None) -> int:
        """The number of the speaker called `speaker`, registered on first sight."""
        name = (speaker or "").strip()
        if name.lower() in ROLE_SPEAKERS or not name:
            return 0
        number = self.speaker_numbers.get(name)
        if number is None:
            terms = frozenset(text_terms(name))
            number = len(self.speaker_names) if terms else 0
            if terms:
                self.speaker_names.append(terms)
            self.speaker_numbers[name] = number
        return number

    def questions_before(self, rows: np.ndarray, questions: np.ndarray) -> np.ndarray:
        """For each of `rows`, the row among `questions` of the turn just before it in its session
        when that turn asks (ends with a question mark) and both are named people's, different
        ones; -1 where there is none. Roles are no names (ROLE_SPEAKERS): the reply an assistant
        gives a user is left alone (tools/recall/README.md, "A reply to a question")."""
        table = self.table
        found = np.full(len(rows), -1, dtype=np.int64)
        questions = questions[table["asks"][questions] & (table["speaker"][questions] != 0)]
        if not len(rows) or not len(questions):
            return found
        # One integer per (session, seq): seq stays below `span`, so no two turns share a key.
        span = np.int64(max(table["seq"][rows].max(), table["seq"][questions].max())) + 2
        keys = table["session"][rows] * span + table["seq"][rows]
        asking = table["session"][questions] * span + table["seq"][questions]
        order = np.argsort(asking, kind="stable")
        asking, questions = asking[order], questions[order]
        at = np.minimum(np.searchsorted(asking, keys - 1), len(asking) - 1)
        speakers = table["speaker"]
        answers = (
            (asking[at] == keys - 1)
            & (speakers[rows] != 0)
            & (speakers[questions[at]] != speakers[rows])
        )
        found[answers] = questions[at[answers]]
        return found

    def speakers_named(self, terms: set[str]) -> list[int]:
        """The speakers one of whose name terms is among `terms` (a query's, resolved)."""
        return [
            number
            for number, name in enumerate(self.speaker_names)
            if number and not name.isdisjoint(terms)
        ]

    def _load(self, ids: list[int]) -> None:
        for document in turn_documents(
            ids, terms_for=self._stored_terms, speakers=self.scope_speakers
        ):
            self._add(
                document.pk,
                {**document.values, "speaker": self.speaker_number(document.speaker)},
                document.bag,
                self._vector(document.blob, document.model_id),
                own=document.own,
            )


@dataclass
class TurnDocument:
    pk: int
    values: dict
    bag: dict[str, float]
    own: Counter
    blob: bytes | None
    model_id: str
    speaker: str


def turn_documents(
    ids: list[int],
    *,
    terms_for: Callable[[list[int], dict[int, str]], dict[int, list[str]]],
    speakers: dict[int, set[str]],
) -> list[TurnDocument]:
    """The documents that change when turns `ids` change: theirs and their neighbours' (a turn's
    document holds the terms of the turns around it). Adds every speaker's terms to `speakers`,
    under the scope of the turn."""
    window = settings.TIDELINE_SEARCH_TURN_NEIGHBOURS
    changed = list(ContextTurn.objects.filter(pk__in=ids).values_list("session_id", "seq", "pk"))
    spans: dict[int, list[int]] = {}
    for session_id, seq, _ in changed:
        low, high = spans.get(session_id, [seq, seq])
        spans[session_id] = [min(low, seq), max(high, seq)]
    documents: list[TurnDocument] = []
    for session_id, (low, high) in spans.items():
        documents += _session_span_documents(
            session_id, low, high, window, terms_for=terms_for, speakers=speakers
        )
    return documents


def _session_span_documents(
    session_id: int,
    low: int,
    high: int,
    window: int,
    *,
    terms_for,
    speakers: dict[int, set[str]],
) -> list[TurnDocument]:
    """The documents of turns low-window..high+window of a session: their own text or a
    neighbour's changed."""
    rows = list(
        ContextTurn.objects.filter(
            session_id=session_id, seq__gte=low - 2 * window, seq__lte=high + 2 * window
        )
        .order_by("seq")
        .values_list(
            "pk",
            "scope_id",
            "seq",
            "occurred_at",
            "speaker",
            "content",
            "embedding",
            "embedding_model",
        )
    )
    terms = terms_for([row[0] for row in rows], {row[0]: f"{row[4]} {row[5]}" for row in rows})
    neighbour_weight = settings.TIDELINE_SEARCH_NEIGHBOUR_WEIGHT
    date_weight = settings.TIDELINE_SEARCH_DATE_WEIGHT
    # A neighbour lends its words, not its speaker's name: with the name, in a two-person chat
    # every turn would hold both names, and a question naming one speaker would match the other's
    # turns through whoever spoke next to them (LoCoMo R@10 tune half 83.3 -> 84.1).
    lent: dict[int, Counter] = {}
    for row in rows:
        name = text_terms(row[4] or "")
        speakers.setdefault(row[1], set()).update(name)
        lent[row[0]] = Counter(terms.get(row[0], [])) - Counter(name)
    documents = []
    for position, row in enumerate(rows):
        pk, scope_id, seq, occurred_at, speaker, content, blob, model_id = row
        if not low - window <= seq <= high + window:
            continue
        own = Counter(terms.get(pk, []))
        bag: dict[str, float] = Counter(own)
        if window and neighbour_weight:
            for other in rows[max(0, position - window) : position + window + 1]:
                if other[0] == pk or abs(other[2] - seq) > window:
                    continue
                for term, count in lent[other[0]].items():
                    bag[term] = bag.get(term, 0.0) + neighbour_weight * count
        if date_weight:
            for term in date_terms(occurred_at):
                bag[term] = bag.get(term, 0.0) + date_weight
        values = {
            "scope": scope_id,
            "session": session_id,
            "seq": seq,
            "occurred_at": epoch(occurred_at, 0.0),
            "asks": ends_asking(content or ""),
            "own_terms": len(own),
            **answer_flags(content or "", own),
        }
        documents.append(TurnDocument(pk, values, bag, own, blob, model_id, speaker or ""))
    return documents
