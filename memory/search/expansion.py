"""Query words expanded by the store's words nearest them (issue 14).

Most of what LoCoMo still missed at R@10 was a gold turn that does not say the question's word:
"What items does John mention having as a child?" against "the film camera I had as a kid". The
bundled model embeds single words well enough to bridge part of that: over LoCoMo's vocabulary
"child" is nearest "kid" (0.90), "movies" "films" (0.93), "pets" "animals" and "dogs". So every word
of the stored turns keeps a vector (memory.models.WordVector, written as turns are embedded), and a
turn query of at most TIDELINE_SEARCH_EXPANSION_MAX_TERMS terms adds, as a prior,
TIDELINE_SEARCH_EXPANSION_WEIGHT × the BM25 of each query word's TIDELINE_SEARCH_EXPANSION_NEIGHBOURS
nearest words (cosine at least the model's `expansion_min_cosine`), scaled to its best row.

Measured in the app (tools/recall/README.md, against the same stores with the weight at 0): LoCoMo
R@5 / R@10 tune half 75.4 / 84.1 → 76.1 / 83.9, held-out 74.9 / 82.6 → 74.9 / 82.9; RealMem turn
hits collapsed to sessions 0.603 / 0.637 → 0.607 / 0.642 (tune / held-out R@5). Longer queries are
left alone: a dialogue-length query expands into generic words, and RealMem fell when they were
expanded.

Visibility: the vocabulary is the whole store's, but a word expands a query only when the caller's
visible turns hold it (its document frequency in the caller's scopes), and the nearest words are
taken after that filter, so a word seen only in another scope neither expands a query nor takes an
expansion's place. The names of who spoke in the caller's scopes never expand or are expanded:
they match a person, not a topic.
"""

import logging
import re
import threading
import unicodedata
from functools import lru_cache

import numpy as np
from django.conf import settings
from django.db import connection

from memory.models import WordVector
from memory.search.calibration import Calibration
from memory.search.text import text_terms

logger = logging.getLogger("tideline.search")

# Letters only (any script), three or more: numbers, dates and two-letter words are not topics.
_WORD = re.compile(r"[^\W\d_]{3,}")
WORD_MAX_CHARS = 100
# Candidates kept per query word beyond the neighbours wanted: the query's own terms, speakers'
# names and words the caller cannot see are dropped after the nearest are found.
CANDIDATE_MARGIN = 8


@lru_cache(maxsize=200_000)
def word_term(surface: str) -> str | None:
    """The index term of one word, or None when the word is not exactly one term (a CJK run that
    segments into several, a stop word)."""
    terms = text_terms(surface)
    return terms[0] if len(terms) == 1 else None


def text_words(text: str) -> list[tuple[str, str]]:
    """(term, surface form) of each word of `text` that is one index term, in order, repeats kept."""
    words = []
    normal = unicodedata.normalize("NFKC", text).lower()
    for surface in _WORD.findall(normal):
        if len(surface) > WORD_MAX_CHARS:
            continue
        term = word_term(surface)
        if term is not None and len(term) <= WORD_MAX_CHARS:
            words.append((term, surface))
    return words


class Vocabulary:
    """The store's word vectors under one model, held in process and extended by the rows added
    since the last query (the table is append-only)."""

    def __init__(self, *, model_id: str, dim: int) -> None:
        self.model_id = model_id
        self.dim = dim
        self.lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.terms: list[str] = []
        # One word per column (dim × capacity), grown by doubling: a few query words against
        # thousands of stored ones stream long rows, about twice as fast as one row per word.
        self.columns = np.zeros((self.dim, 1024), dtype=np.float32)
        self.size = 0
        self.last_pk = 0
        self.last_token: int | None = None

    def refresh(self) -> None:
        """One statement per query: the last row held (to see it is still there: SQLite reuses a
        rolled-back row's id) and every row after it."""
        with self.lock:
            rows = self._rows_from(self.last_pk)
            if self.last_pk:
                if not rows or rows[0][0] != self.last_pk or rows[0][3] != self.last_token:
                    self._reset()
                    rows = self._rows_from(0)
                else:
                    rows = rows[1:]
            kept = [
                (term, vector)
                for _, term, blob, _ in rows
                if (vector := np.frombuffer(bytes(blob), dtype=np.float32)).shape[0] == self.dim
            ]
            if kept:
                self._append(kept)
            if rows:
                self.last_pk, self.last_token = rows[-1][0], rows[-1][3]

    def _rows_from(self, pk: int) -> list[tuple]:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, term, embedding, token FROM {WordVector._meta.db_table} "
                "WHERE embedding_model = %s AND id >= %s ORDER BY id",
                [self.model_id, pk],
            )
            return cursor.fetchall()

    def _append(self, kept: list[tuple[str, np.ndarray]]) -> None:
        size = self.size + len(kept)
        if size > self.columns.shape[1]:
            # A new buffer: a query still reading the old one keeps a consistent copy.
            grown = np.zeros((self.dim, max(size, 2 * self.columns.shape[1])), dtype=np.float32)
            grown[:, : self.size] = self.columns[:, : self.size]
            self.columns = grown
        self.columns[:, self.size : size] = np.vstack([vector for _, vector in kept]).T
        self.terms.extend(term for term, _ in kept)
        self.size = size

    def nearest(self, vectors: np.ndarray, *, count: int, least: float) -> list[list[str]]:
        """For each row of `vectors`, the `count` nearest words at cosine ≥ `least`, best first."""
        with self.lock:
            terms, columns, size = self.terms, self.columns, self.size
        if not size:
            return [[] for _ in vectors]
        cosines = vectors @ columns[:, :size]
        count = min(count, size)
        found = []
        for row in cosines:
            best = np.argpartition(-row, count - 1)[:count]
            best = best[np.argsort(-row[best], kind="stable")]
            found.append([terms[at] for at in best if row[at] >= least])
        return found


_vocabularies: dict[tuple[str, int], Vocabulary] = {}
_vocabularies_lock = threading.Lock()
_word_vectors: dict[str, np.ndarray] = {}
WORD_VECTOR_CACHE = 20_000


def vocabulary_get(*, model_id: str, dim: int) -> Vocabulary:
    with _vocabularies_lock:
        vocabulary = _vocabularies.setdefault(
            (model_id, dim), Vocabulary(model_id=model_id, dim=dim)
        )
    vocabulary.refresh()
    return vocabulary


def expansion_candidates(
    *, query: str, embedder, dim: int, calibration: Calibration
) -> dict[str, list[str]]:
    """query term → the store's words nearest it, best first, more than will be kept: the caller's
    index drops the query's own terms, speakers' names and words its caller cannot see
    (`expansion_choose`). Empty when the query is long, the model is not calibrated for it, or
    the embedder fails (search then ranks without expansion)."""
    least = calibration.expansion_min_cosine
    if (
        embedder is None
        or least is None
        or not dim
        or not settings.TIDELINE_SEARCH_EXPANSION_WEIGHT
    ):
        return {}
    words: dict[str, str] = {}
    for term, surface in text_words(query):
        words.setdefault(term, surface)
    if not words or len(set(text_terms(query))) > settings.TIDELINE_SEARCH_EXPANSION_MAX_TERMS:
        return {}
    vocabulary = vocabulary_get(model_id=embedder.model_id, dim=dim)
    # Each query word is embedded as the query says it (reading the store's vector of its term
    # instead, whose surface form may differ, cost LoCoMo 0.2 of R@5 on both halves), and kept
    # for the next query that says it.
    cached = {surface: _word_vectors.get(surface) for surface in words.values()}
    missing = [surface for surface, vector in cached.items() if vector is None]
    if missing:
        try:
            fresh = np.asarray(embedder.embed_passages(missing), dtype=np.float32)
        except Exception:
            logger.exception("query word embedding failed; searching without expansion")
            return {}
        if fresh.shape != (len(missing), dim):
            return {}
        cached.update(zip(missing, fresh, strict=True))
        if len(_word_vectors) > WORD_VECTOR_CACHE:
            _word_vectors.clear()
        _word_vectors.update(zip(missing, fresh, strict=True))
    vectors = np.vstack([cached[surface] for surface in words.values()])
    count = settings.TIDELINE_SEARCH_EXPANSION_NEIGHBOURS + len(words) + CANDIDATE_MARGIN
    nearest = vocabulary.nearest(vectors, count=count, least=least)
    return dict(zip(words, nearest, strict=True))


def expansion_choose(
    *,
    index,
    candidates: dict[str, list[str]],
    terms: list[str],
    stats_rows: np.ndarray,
    speakers: set[str],
) -> dict[str, list[str]]:
    """query term → the words that expand it: its nearest words that are not the query's own
    terms nor the names of who spoke in the caller's scopes (`speakers`) and that the caller's
    visible turns hold, at most TIDELINE_SEARCH_EXPANSION_NEIGHBOURS each."""
    wanted = settings.TIDELINE_SEARCH_EXPANSION_NEIGHBOURS
    own = set(terms)
    chosen: dict[str, list[str]] = {}
    for term, nearest in candidates.items():
        if term not in own or term in speakers:
            continue
        kept = [
            word
            for word in nearest
            if word not in own and word not in speakers and index.ideal_bm25([word], stats_rows) > 0
        ][:wanted]
        if kept:
            chosen[term] = kept
    return chosen
