"""RealMem session-level retrieval recall through the real write path and the real turn_search.

One store per persona. Sessions are imported in order (turns via `turns_record`, the session's date
as `occurred_at`, embedded after commit); before each session, every query turn in it is asked of
`turn_search` with the query turn's text as written, over the sessions strictly before it (the
store holds nothing later), asked on its session's day (relative days such as "yesterday" count
from there), no LLM. Two units, both reported: turns ranked by `turn_search` and
collapsed to sessions by first occurrence, and whole sessions ranked by `session_search`.
Printed: session R@5/10, all@5/10 and MRR overall and per category for each, the plain-BM25 floor, the
per-turn block's R@5 (every user turn also stored as a narrative memory, asked of `memory_search`
and of `context_turn`), and query latency. Protocol: ../shared/bench/README.md. Runs in a scratch
database unless `--in-place`.
"""

import ast
import json
import math
import re
import statistics
import time
from collections import Counter
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from django.core.management.base import CommandError
from django.db import connection

KS = (5, 10)
CATEGORIES = (
    "Dynamic Incremental",
    "Dynamic Updating",
    "Implicit Preference",
    "Temporal-reasoning",
)
# The block's unit is different: only user turns are memories and five memories (about four
# sessions) are shown, so its floor is plain BM25 over user turns, top 5 collapsed to sessions
# (\w+ tokens, k1 1.5, b 0.75; the same script gives 0.590 at session unit, README 0.594).
BLOCK_BM25_FLOOR = {
    "overall": 0.433,
    "Dynamic Incremental": 0.445,
    "Dynamic Updating": 0.469,
    "Implicit Preference": 0.316,
    "Temporal-reasoning": 0.455,
}
TURN_POOL = 200
_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})")
_WORD = re.compile(r"\w+")
# The protocol's plain BM25 (../shared/bench/README.md).
BM25_K1 = 1.5
BM25_B = 0.75


def dataset_arguments(parser) -> None:
    """The arguments every RealMem bench takes: which persona files, and where to import them."""
    parser.add_argument("--data", required=True, help="RealMem dataset directory (or one file)")
    parser.add_argument(
        "--personas", type=int, default=0, help="only the first N personas by file name (0 = all)"
    )
    parser.add_argument(
        "--persona",
        action="append",
        default=[],
        help="only personas whose file name contains this (repeatable)",
    )
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="import into the configured database instead of a scratch one (tests use this)",
    )


def add_arguments(parser) -> None:
    dataset_arguments(parser)
    parser.add_argument(
        "--sessions",
        type=int,
        default=0,
        help="only each persona's first N sessions and the queries in them (0 = all): a slow "
        "embedder's confirmation run on a smaller corpus",
    )
    parser.add_argument(
        "--block",
        action="store_true",
        help="also store user turns as memories and measure memory_search vs the per-turn block",
    )


def _truthy(value) -> bool:
    return value is True or value == "True"


def _gold(raw) -> list[str]:
    if isinstance(raw, str):
        try:
            raw = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return []
    return [str(item) for item in raw or []]


def session_day(text: str) -> datetime:
    """RealMem's "2025-12-25 (Thursday)"."""
    match = _DATE.search(text or "")
    if not match:
        raise CommandError(f"unreadable session date {text!r}")
    return datetime.strptime(match.group(1), "%Y-%m-%d").replace(hour=12, tzinfo=UTC)


def persona_queries(dialogues: list[dict]) -> list[tuple[int, str, str, list[str]]]:
    """(session position, category, query text, gold session uuids) of every scorable query: gold
    strictly before the query's own session."""
    position_of = {session["session_uuid"]: n for n, session in enumerate(dialogues)}
    found = []
    for n, session in enumerate(dialogues):
        turns = session["dialogue_turns"]
        for i, turn in enumerate(turns):
            if not _truthy(turn.get("is_query")):
                continue
            answer = turns[i + 1] if i + 1 < len(turns) else {}
            gold = _gold(answer.get("memory_session_uuids"))
            if not gold or any(position_of.get(uuid, n) >= n for uuid in gold):
                continue
            found.append((n, turn.get("category_name", ""), turn["content"], gold))
    return found


def bm25_sessions_ranked(
    dialogues: list[dict], queries: list[tuple[int, str, str, list[str]]]
) -> list[list[str]]:
    r"""The protocol's plain-BM25 floor at session unit, for each query (in `persona_queries`'
    order): the uuids of the sessions strictly before its own, best first. A session is all its
    turns' text as one document. Computed here so every category has a floor; the README gives
    only the overall figure."""
    documents = [
        " ".join(turn.get("content", "") for turn in session["dialogue_turns"])
        for session in dialogues
    ]
    ranked = bm25_ranked(documents, [(position, text) for position, _, text, _ in queries])
    return [[dialogues[n]["session_uuid"] for n in order] for order in ranked]


def bm25_ranked(documents: list[str], queries: list[tuple[int, str]]) -> list[list[int]]:
    r"""Plain BM25 (k1 1.5, b 0.75; lowercased \w+ tokens, no stemming or stop words, Lucene's
    idf): for each (cutoff, text), the positions of `documents[:cutoff]` best first, collection
    statistics over those documents alone (what was stored when the query was asked)."""
    bags = [Counter(_WORD.findall(document.lower())) for document in documents]
    lengths = [sum(bag.values()) for bag in bags]
    ranked: list[list[int]] = [[] for _ in queries]
    # Document frequencies over the documents before a query, grown as the queries move forward.
    frequency: Counter = Counter()
    counted = 0
    for slot in sorted(range(len(queries)), key=lambda at: queries[at][0]):
        cutoff, text = queries[slot]
        for n in range(counted, cutoff):
            frequency.update(bags[n].keys())
        counted = max(counted, cutoff)
        mean_length = sum(lengths[:cutoff]) / max(cutoff, 1)
        # Each occurrence of a query word counts, as in the usual BM25 implementations.
        weights = [
            (term, math.log(1 + (cutoff - frequency[term] + 0.5) / (frequency[term] + 0.5)))
            for term in _WORD.findall(text.lower())
            if frequency[term]
        ]
        scores = []
        for n in range(cutoff):
            norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths[n] / max(mean_length, 1e-9))
            score = sum(
                idf * bags[n][term] * (BM25_K1 + 1) / (bags[n][term] + norm)
                for term, idf in weights
                if term in bags[n]
            )
            scores.append((-score, n))
        ranked[slot] = [n for _, n in sorted(scores)]
    return ranked


def _import_session(scope_id: int, tag: str, session: dict, dia_of: dict) -> list[tuple]:
    from memory.services.timeline import TurnInput, session_start, turns_record

    date = session_day(session.get("current_time", ""))
    opened = session_start(
        runtime="realmem-bench",
        external_id=f"{tag}/{session['session_uuid']}",
        scope_id=scope_id,
        started_at=date,
    )
    inputs = [
        TurnInput(
            role="user" if turn["speaker"] == "User" else "assistant",
            speaker=turn["speaker"],
            content=turn["content"],
            occurred_at=date,
            meta={"session_uuid": session["session_uuid"]},
        )
        for turn in session["dialogue_turns"]
        if turn.get("content", "").strip()
    ]
    if inputs:
        turns_record(session_id=opened.pk, turns=inputs)
    dia_of[opened.pk] = session["session_uuid"]
    return [(turn.content, date, session["session_uuid"]) for turn in inputs if turn.role == "user"]


def evaluate(
    files: list[Path],
    *,
    run_tag: str,
    out,
    block: bool = False,
    progress=None,
    sessions: int = 0,
) -> dict:
    """Import each persona session by session, asking each query where it falls; `progress`, a
    bar, advances by one per persona."""
    from memory.bench.locomo import block_ranked, memories_seed
    from memory.models import ScopeKind
    from memory.search import memory_search, turn_search
    from memory.search.sessions import session_search
    from memory.services.scopes import scope_ensure

    rows = []
    session_rows = []
    bm25_rows = []
    block_rows = []
    latencies = []
    session_latencies = []
    for path in files:
        dialogues = json.loads(path.read_text())["dialogues"]
        if sessions:
            dialogues = dialogues[:sessions]
        queries = persona_queries(dialogues)
        bm25_rows.extend(
            (category, gold, ranked)
            for (_, category, _, gold), ranked in zip(
                queries, bm25_sessions_ranked(dialogues, queries), strict=True
            )
        )
        by_session: dict[int, list] = {}
        for query in queries:
            by_session.setdefault(query[0], []).append(query)
        scope = scope_ensure(
            kind=ScopeKind.PROJECT,
            key=f"bench/realmem/{run_tag}/{path.stem}",
            label=f"RealMem {path.stem}",
        )
        started = time.perf_counter()
        uuid_of: dict[int, str] = {}
        memory_uuid: dict[int, str] = {}
        for n, session in enumerate(dialogues):
            # Asked on its session's day: "yesterday" in a query is the day before it, whatever
            # the day the bench runs on.
            asked = session_day(session.get("current_time", ""))
            for _, category, text, gold in by_session.get(n, []):
                began = time.perf_counter()
                hits = turn_search(
                    query=text, scope_ids=[scope.pk], limit=TURN_POOL, asked_at=asked
                )
                latencies.append((time.perf_counter() - began) * 1000)
                ranked = list(dict.fromkeys(uuid_of.get(hit.turn.session_id) for hit in hits))
                rows.append((category, gold, ranked))
                began = time.perf_counter()
                sessions_hit = session_search(query=text, scope_ids=[scope.pk], limit=max(KS))
                session_latencies.append((time.perf_counter() - began) * 1000)
                session_rows.append(
                    (category, gold, [uuid_of.get(hit.session.pk) for hit in sessions_hit])
                )
                if block:
                    searched = memory_search(
                        query=text, scope_ids=[scope.pk], limit=5, asked_at=asked
                    )
                    shown = block_ranked(query=text, scope_id=scope.pk, asked_at=asked)
                    block_rows.append(
                        (
                            category,
                            gold,
                            list(dict.fromkeys(memory_uuid.get(h.memory.pk) for h in searched)),
                            list(dict.fromkeys(memory_uuid.get(pk) for pk in shown)),
                        )
                    )
            user_turns = _import_session(scope.pk, f"{run_tag}/{path.stem}", session, uuid_of)
            if block and user_turns:
                seeded = memories_seed(
                    scope_id=scope.pk,
                    turns={
                        f"{uuid}/{k}": (text, date)
                        for k, (text, date, uuid) in enumerate(user_turns)
                    },
                )
                memory_uuid.update({pk: key.split("/")[0] for pk, key in seeded.items()})
        out(
            f"  {path.stem}: {len(dialogues)} sessions, {len(queries)} queries "
            f"in {time.perf_counter() - started:.0f} s"
        )
        if progress is not None:
            progress.update(1)
    figures = _figures(rows, block_rows, latencies)
    figures["sessions"] = _figures(session_rows, [], session_latencies)
    figures["bm25"] = _figures(bm25_rows, [], [])
    return figures


def _below_floor(figures: dict) -> list[str]:
    """The slices (overall, then each category) where session_search's R@5 is not above BM25's."""
    ours, floor = figures["sessions"], figures["bm25"]
    slices = [("overall", ours["overall"], floor["overall"])] + [
        (name, values, floor["categories"][name]) for name, values in ours["categories"].items()
    ]
    return [name for name, values, plain in slices if values["R@5"] <= plain["R@5"]]


def _recall(subset, k: int, column: int = 2) -> tuple[float, float]:
    if not subset:
        return 0.0, 0.0
    share = [len(set(row[1]) & set(row[column][:k])) / len(set(row[1])) for row in subset]
    every = [float(set(row[1]) <= set(row[column][:k])) for row in subset]
    return statistics.fmean(share), statistics.fmean(every)


def _mrr(subset) -> float:
    values = []
    for _, gold, ranked in subset:
        rank = next((i for i, uuid in enumerate(ranked, start=1) if uuid in gold), None)
        values.append(1.0 / rank if rank else 0.0)
    return statistics.fmean(values) if values else 0.0


def _figures(rows, block_rows, latencies) -> dict:
    def summary(subset):
        return {
            "n": len(subset),
            **{f"R@{k}": _recall(subset, k)[0] for k in KS},
            **{f"all@{k}": _recall(subset, k)[1] for k in KS},
            "MRR": _mrr(subset),
        }

    ordered = sorted(latencies) or [0.0]
    figures = {
        "overall": summary(rows),
        "categories": {
            name: summary([row for row in rows if row[0] == name])
            for name in CATEGORIES
            if any(row[0] == name for row in rows)
        },
        "p50_ms": statistics.median(ordered),
        "p95_ms": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
    }
    if block_rows:
        figures["block"] = {
            name: (_recall(subset, 5, 2)[0], _recall(subset, 5, 3)[0])
            for name, subset in [("overall", block_rows)]
            + [(c, [row for row in block_rows if row[0] == c]) for c in CATEGORIES]
            if subset
        }
    return figures


def figures_print(figures: dict, out) -> None:
    out(
        f"RealMem session-level retrieval (turns ranked and collapsed, or sessions ranked): "
        f"{figures['overall']['n']} scorable queries"
    )
    out("")
    columns = [f"R@{k}" for k in KS] + [f"all@{k}" for k in KS] + ["MRR"]
    out(f"{'':<34}" + "".join(f"{c:>8}" for c in columns))
    for label, unit in (
        ("Tideline turn_search", figures),
        ("Tideline session_search", figures["sessions"]),
        ("plain BM25, sessions", figures["bm25"]),
    ):
        for name, values in [(label, unit["overall"])] + [
            (f"  {name} ({values['n']})", values) for name, values in unit["categories"].items()
        ]:
            out(f"{name:<34}" + "".join(f"{values[c]:8.3f}" for c in columns))
    out(
        "plain BM25 floor (README): session unit R@5/10 0.594/0.709, turn unit collapsed "
        "0.523/0.642, Implicit Preference R@5 0.42; the rows above are the same floor computed "
        "here, per category"
    )
    out(f"session_search R@5 not above plain BM25 in: {', '.join(_below_floor(figures)) or 'none'}")
    if "block" in figures:
        out("")
        out(f"{'user turns stored as memories (R@5)':<34}{'search':>9}{'block':>9}{'BM25':>9}")
        for name, (searched, shown) in figures["block"].items():
            floor = BLOCK_BM25_FLOOR.get(name)
            bm25 = f"{floor:9.3f}" if floor is not None else f"{'-':>9}"
            out(f"{name:<34}{searched:9.3f}{shown:9.3f}{bm25}")
    out("")
    out(
        f"query latency (turn_search incl. query embedding): p50 {figures['p50_ms']:.1f} ms, "
        f"p95 {figures['p95_ms']:.1f} ms; session_search p50 "
        f"{figures['sessions']['p50_ms']:.1f} ms, p95 {figures['sessions']['p95_ms']:.1f} ms"
    )


def dataset_files(options) -> list[Path]:
    """The persona files `--data`, `--persona` and `--personas` choose, each checked to be RealMem."""
    path = Path(options["data"])
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise CommandError(f"no RealMem dialogue files at {path}")
    for file in files:
        try:
            data = json.loads(file.read_text())
        except ValueError as exc:
            raise CommandError(f"{file} is not JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("dialogues"), list):
            raise CommandError(f"{file} is not in RealMem format (an object with dialogues)")
    if options["persona"]:
        files = [f for f in files if any(name in f.stem for name in options["persona"])]
    if options["personas"]:
        files = files[: options["personas"]]
    if not files:
        raise CommandError("no persona matches --persona")
    return files


@contextmanager
def scratch_database(options, out):
    """A throwaway test database for the run unless `--in-place`."""
    if options["in_place"]:
        yield
        return
    out("creating a scratch database (nothing is written to the configured store)…")
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        yield
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def run(command, options) -> None:
    files = dataset_files(options)
    out = command.stdout.write
    run_tag = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    with scratch_database(options, out):
        started = time.perf_counter()
        bar = command.progress(total=len(files), desc="RealMem personas", unit="persona")
        figures = evaluate(
            files,
            run_tag=run_tag,
            out=out,
            block=options["block"],
            progress=bar,
            sessions=options["sessions"],
        )
        bar.close()
        out(f"  total {time.perf_counter() - started:.0f} s")
        out("")
        figures_print(figures, out)
