"""RealMem memory-level retrieval: the memories an agent was given, asked for by what the user said.

`bench realmem` asks which earlier *sessions* a query draws on. This bench asks the question an
agent's per-turn block answers: which stored *memories*. RealMem records, for every session, the
memories its generator's memory manager extracted (`extracted_memory`), and on the answer to each
query the ones that manager used (`memory_used`: session uuid and content). So one store per
persona holds each earlier session's extracted memories as narrative memories (valid from the
session's day), and before each session every query turn in it (its text as written: dialogue-
length, often with no question in it) is asked of `memory_search` (top 10) and of the per-turn
block (`context_turn`, as shown), over the memories of the sessions strictly before it. Gold: the
used memories, matched to the stored ones by session and content (3,047 of the 3,052 used; a query
none of whose used memories is earlier is not scored). No LLM anywhere.

Printed: R@5/10 (share of a query's gold memories in the top k), all@5/10 and MRR, overall, per
category and per half (tune: the first four personas by file name; held-out: the rest), for
memory_search and for plain BM25 over the same memories; the block's R@5 beside memory_search's;
query latency. This is the dev set closest to a memory-level, dialogue-query evaluation, so a
change to memory ranking is tuned on one half and confirmed on the other here, and on LoCoMo.
"""

import ast
import json
import time
from datetime import UTC, datetime
from pathlib import Path

from memory.bench.realmem import (
    CATEGORIES,
    _figures,
    _truthy,
    bm25_ranked,
    dataset_arguments,
    dataset_files,
    scratch_database,
    session_day,
)

SEARCHED = 10
TUNE_PERSONAS = 4
HALVES = ("tune", "held-out")


def add_arguments(parser) -> None:
    dataset_arguments(parser)


def memory_text(content) -> str:
    """An extracted memory's content as stored: most are text, a few are JSON objects (a trip's
    itinerary), kept as their JSON so the same content always reads the same."""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def extracted_memories(session: dict) -> list[tuple[str, str]]:
    """(key, text) of a session's extracted memories; the key is `<session uuid>/<position>`."""
    return [
        (f"{session['session_uuid']}/{position}", memory_text(memory.get("content", "")))
        for position, memory in enumerate(session.get("extracted_memory") or [])
        if memory_text(memory.get("content", "")).strip()
    ]


def _used(raw) -> list[dict]:
    if isinstance(raw, str):
        try:
            raw = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return []
    return [item for item in raw or [] if isinstance(item, dict)]


def memory_queries(dialogues: list[dict]) -> list[tuple[int, str, str, list[str]]]:
    """(session position, category, query text, gold memory keys) of every scorable query: the
    memories its answer used that an earlier session extracted."""
    position_of = {session["session_uuid"]: n for n, session in enumerate(dialogues)}
    key_of = {
        (session["session_uuid"], text): key
        for session in dialogues
        for key, text in extracted_memories(session)
    }
    found = []
    for n, session in enumerate(dialogues):
        turns = session["dialogue_turns"]
        for i, turn in enumerate(turns):
            if not _truthy(turn.get("is_query")):
                continue
            answer = turns[i + 1] if i + 1 < len(turns) else {}
            gold = []
            for used in _used(answer.get("memory_used")):
                uuid = str(used.get("session_uuid", ""))
                key = key_of.get((uuid, memory_text(used.get("content", ""))))
                if key is not None and position_of[uuid] < n:
                    gold.append(key)
            if gold:
                found.append((n, turn.get("category_name", ""), turn["content"], gold))
    return found


def evaluate(files: list[Path], *, run_tag: str, out, progress=None) -> dict:
    """Store each persona's memories session by session, asking each query where it falls;
    `progress`, a bar, advances by one per persona. Returns the figures by half ("all" too)."""
    from memory.bench.locomo import block_ranked, memories_seed
    from memory.models import ScopeKind
    from memory.search import memory_search
    from memory.services.scopes import scope_ensure

    rows: dict[str, list] = {half: [] for half in HALVES}
    block_rows: dict[str, list] = {half: [] for half in HALVES}
    bm25_rows: dict[str, list] = {half: [] for half in HALVES}
    latencies: list[float] = []
    stored_count = 0
    for number, path in enumerate(files):
        half = HALVES[0] if number < TUNE_PERSONAS else HALVES[1]
        dialogues = json.loads(path.read_text())["dialogues"]
        queries = memory_queries(dialogues)
        memories = [
            (key, text) for session in dialogues for key, text in extracted_memories(session)
        ]
        stored_before = []
        total = 0
        for session in dialogues:
            stored_before.append(total)
            total += len(extracted_memories(session))
        ranked = bm25_ranked(
            [text for _, text in memories],
            [(stored_before[position], text) for position, _, text, _ in queries],
        )
        bm25_rows[half].extend(
            (category, gold, [memories[at][0] for at in order])
            for (_, category, _, gold), order in zip(queries, ranked, strict=True)
        )
        by_session: dict[int, list] = {}
        for query in queries:
            by_session.setdefault(query[0], []).append(query)
        scope = scope_ensure(
            kind=ScopeKind.PROJECT,
            key=f"bench/realmem-memories/{run_tag}/{path.stem}",
            label=f"RealMem memories {path.stem}",
        )
        started = time.perf_counter()
        key_of: dict[int, str] = {}
        for n, session in enumerate(dialogues):
            # Asked on its session's day: "yesterday" counts from there, whatever the day the
            # bench runs on.
            asked = session_day(session.get("current_time", ""))
            for _, category, text, gold in by_session.get(n, []):
                began = time.perf_counter()
                searched = memory_search(
                    query=text, scope_ids=[scope.pk], limit=SEARCHED, asked_at=asked
                )
                latencies.append((time.perf_counter() - began) * 1000)
                shown = block_ranked(query=text, scope_id=scope.pk, asked_at=asked)
                ranked_keys = [key_of[hit.memory.pk] for hit in searched]
                rows[half].append((category, gold, ranked_keys))
                block_rows[half].append(
                    (category, gold, ranked_keys, [key_of.get(pk) for pk in shown])
                )
            day = session_day(session.get("current_time", ""))
            extracted = extracted_memories(session)
            if extracted:
                key_of.update(
                    memories_seed(
                        scope_id=scope.pk, turns={key: (text, day) for key, text in extracted}
                    )
                )
        stored_count += len(memories)
        out(
            f"  {path.stem}: {len(memories)} memories, {len(queries)} queries "
            f"in {time.perf_counter() - started:.0f} s"
        )
        if progress is not None:
            progress.update(1)
    figures = {}
    for name, chosen in (("all", HALVES), *((half, (half,)) for half in HALVES)):
        searched_rows = [row for half in chosen for row in rows[half]]
        if not searched_rows:
            continue
        figures[name] = _figures(
            searched_rows, [row for half in chosen for row in block_rows[half]], latencies
        )
        figures[name]["bm25"] = _figures(
            [row for half in chosen for row in bm25_rows[half]], [], []
        )
    figures["memories"] = stored_count
    return figures


def figures_print(figures: dict, out) -> None:
    everything = figures["all"]
    out(
        f"RealMem memory-level retrieval (extracted memories, gold = the memories each answer "
        f"used): {everything['overall']['n']} scorable queries, {figures['memories']} memories"
    )
    out("")
    columns = ["R@5", "R@10", "all@5", "all@10", "MRR"]
    out(f"{'':<38}" + "".join(f"{c:>8}" for c in columns))
    for label, of in (
        ("Tideline memory_search", lambda unit: unit),
        ("plain BM25, memories", lambda unit: unit["bm25"]),
    ):
        slices = [(label, of(everything)["overall"])]
        slices += [
            (f"  {half}", of(figures[half])["overall"]) for half in HALVES if half in figures
        ]
        slices += [(f"  {name} ({v['n']})", v) for name, v in of(everything)["categories"].items()]
        for name, values in slices:
            out(f"{name:<38}" + "".join(f"{values[c]:8.3f}" for c in columns))
    out("")
    out(f"{'R@5':<38}{'search':>9}{'block':>9}{'BM25':>9}")
    for name in ("overall", *CATEGORIES):
        if name not in everything["block"]:
            continue
        searched, shown = everything["block"][name]
        floor = (
            everything["bm25"]["overall"]
            if name == "overall"
            else everything["bm25"]["categories"][name]
        )
        out(f"{name:<38}{searched:9.3f}{shown:9.3f}{floor['R@5']:9.3f}")
    out("")
    out(
        f"query latency (memory_search incl. query embedding): p50 {everything['p50_ms']:.1f} ms, "
        f"p95 {everything['p95_ms']:.1f} ms"
    )


def run(command, options) -> None:
    files = dataset_files(options)
    out = command.stdout.write
    run_tag = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    with scratch_database(options, out):
        started = time.perf_counter()
        bar = command.progress(total=len(files), desc="RealMem personas", unit="persona")
        figures = evaluate(files, run_tag=run_tag, out=out, progress=bar)
        bar.close()
        out(f"  total {time.perf_counter() - started:.0f} s")
        out("")
        figures_print(figures, out)
