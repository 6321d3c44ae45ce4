"""LoCoMo turn-level retrieval recall through the real write path and the real turn_search.

Each conversation is imported into its own scope (sessions via `session_start`, turns via
`turns_record`, session dates as `occurred_at`, embedded after commit like any write); every
scorable question is then asked of `turn_search` with the question text alone, no LLM. Printed:
turn-level recall@5/10/25/50 overall and per category, session-level recall@k, MRR and query
latency, beside the published DRAGON row and the plain-BM25 floor — for all conversations and for
the two halves separately (conversations 0–4 tune, 5–9 held out: a change is judged on the half it
was not tuned on). With `--block` every turn is also stored as a narrative memory and each question
is asked of `memory_search` (limit 5) and of the per-turn injection block (`context_turn`, T1 + T4),
so the recall an agent actually receives is printed next to search's. Protocol and evidence-id quirks:
../shared/bench/README.md. By default everything runs in a scratch database that is dropped at the
end, so the owner's store never receives benchmark data.
"""

import json
import re
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.core.management.base import CommandError
from django.db import connection, transaction

from memory.management.arguments import LIMIT_MAX, bounded_int

KS = (5, 10, 25, 50)
SESSION_KS = (5, 10, 25)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
PUBLISHED = (
    ("DRAGON (dense), LoCoMo paper", (56.7, 66.2, 76.7, 82.7)),
    ("plain BM25 floor, bench README", (45.7, 53.3, 62.6, 70.4)),
)
DRAGON_R5 = {
    "single-hop": 68.0,
    "multi-hop": 35.4,
    "temporal": 70.4,
    "open-domain": 33.1,
    "adversarial": 43.9,
}
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


def add_arguments(parser) -> None:
    parser.add_argument("--data", required=True, help="path to locomo10.json")
    parser.add_argument(
        "--conversations",
        type=bounded_int(low=0, high=LIMIT_MAX),
        default=0,
        help="only the first N conversations (0 = all)",
    )
    parser.add_argument(
        "--block",
        action="store_true",
        help="also store turns as memories and measure memory_search vs the per-turn block at R@5",
    )
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="import into the configured database instead of a scratch one (tests use this)",
    )


def evidence_normalise(raw: list) -> list[str]:
    """ "D8:6; D9:17" → two ids, "D:11:26" → D11:26, "D30:05" → D30:5; anything else is dropped."""
    ids = []
    for item in raw or []:
        for part in re.split(r"[;,\s]+", str(item)):
            match = _EVIDENCE.fullmatch(part.strip())
            if match:
                ids.append(f"D{int(match.group(1))}:{int(match.group(2))}")
    return list(dict.fromkeys(ids))


def session_date(text: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023"."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError as exc:
        raise CommandError(f"unreadable session date {text!r}") from exc


def conversation_sessions(conversation: dict) -> list[tuple[int, datetime, list[dict]]]:
    numbers = sorted(
        int(key.split("_")[1])
        for key in conversation
        if re.fullmatch(r"session_\d+", key) and conversation[key]
    )
    return [
        (n, session_date(conversation[f"session_{n}_date_time"]), conversation[f"session_{n}"])
        for n in numbers
    ]


def turn_text(turn: dict) -> str:
    """A turn's text, with the caption of the picture it shared."""
    if turn.get("blip_caption"):
        return f"{turn['text']} and shared {turn['blip_caption']}"
    return turn["text"]


def turn_memory_text(turn: dict) -> str:
    """A turn as the narrative memory `--block` stores it."""
    return f'{turn["speaker"]} said, "{turn_text(turn)}"'


def _import(sample: dict, run_tag: str) -> tuple[int, dict[str, tuple[str, datetime]]]:
    """One conversation into its own scope; returns the scope id and {dia_id: (document text,
    date)} of the turns stored."""
    from memory.models import ScopeKind
    from memory.services.scopes import scope_ensure
    from memory.services.timeline import TurnInput, session_start, turns_record

    scope = scope_ensure(
        kind=ScopeKind.PROJECT,
        key=f"bench/locomo/{run_tag}/{sample['sample_id']}",
        label=f"LoCoMo {sample['sample_id']}",
    )
    stored: dict[str, tuple[str, datetime]] = {}
    for number, date, turns in conversation_sessions(sample["conversation"]):
        session = session_start(
            runtime="locomo-bench",
            external_id=f"{run_tag}/{sample['sample_id']}/session_{number}",
            scope_id=scope.pk,
            started_at=date,
        )
        inputs = []
        for turn in turns:
            text = turn_text(turn)
            inputs.append(
                TurnInput(
                    role="user",
                    speaker=turn["speaker"],
                    content=text,
                    occurred_at=date,
                    meta={"dia_id": turn["dia_id"]},
                )
            )
            stored[turn["dia_id"]] = (turn_memory_text(turn), date)
        turns_record(session_id=session.pk, turns=inputs)
    return scope.pk, stored


def _session_of(dia_id: str) -> str:
    return dia_id.split(":")[0]


def _percent(values: list[float]) -> float:
    return 100.0 * sum(values) / len(values) if values else 0.0


def memories_seed(*, scope_id: int, turns: dict[str, tuple[str, datetime]]) -> dict[int, str]:
    """Each turn as a narrative memory (bulk, embedded as passages): {memory id: dia_id}."""
    from memory.models import EmbeddingStatus, Memory, MemoryType, Narrative
    from memory.services.embedding import embedder_get, vector_to_bytes

    embedder = embedder_get()
    dia_ids = list(turns)
    texts = [turns[dia][0] for dia in dia_ids]
    vectors = [None] * len(texts)
    if embedder is not None:
        vectors = [
            vector
            for start in range(0, len(texts), 64)
            for vector in embedder.embed_passages(texts[start : start + 64])
        ]
    with transaction.atomic():
        parents = Memory.objects.bulk_create(
            [
                Memory(
                    memory_type=MemoryType.NARRATIVE,
                    scope_id=scope_id,
                    summary=text[:500],
                    search_text=text,
                    embedding=vector_to_bytes(vector) if vector is not None else None,
                    embedding_model=embedder.model_id if embedder is not None else "",
                    embedding_status=EmbeddingStatus.READY
                    if embedder is not None
                    else EmbeddingStatus.DISABLED,
                    valid_from=turns[dia][1],
                    recorded_at=turns[dia][1],
                )
                for dia, text, vector in zip(dia_ids, texts, vectors, strict=True)
            ]
        )
        fields = Narrative._meta.local_concrete_fields
        columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        marks = ", ".join(["%s"] * len(fields))
        rows = []
        for parent in parents:
            child = Narrative(memory_ptr_id=parent.pk, gesture=parent.search_text[:500], weight=0.5)
            rows.append([f.get_db_prep_save(f.pre_save(child, True), connection) for f in fields])
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {Narrative._meta.db_table} ({columns}) VALUES ({marks})", rows
            )
    return {parent.pk: dia for parent, dia in zip(parents, dia_ids, strict=True)}


def block_ranked(*, query: str, scope_id: int, asked_at: datetime) -> list[int]:
    """Memory ids of the per-turn injection block asked at `asked_at`, in the order it shows
    them."""
    from injection.services.context import context_turn

    block = context_turn(query=query, scope_ids=[scope_id], asked_at=asked_at)
    return [item.memory_id for section in block.sections for item in section.items]


def evaluate(samples: list[dict], *, run_tag: str, out, block: bool = False, progress=None) -> dict:
    """Import, ask every question, and return the figures (also printed to `out`): for all
    conversations, and for the tune (first half) and held-out (second half) conversations.
    `progress`, a bar, advances by one per question asked."""
    from memory.models import ContextTurn
    from memory.search import memory_search, turn_search
    from memory.search.sessions import session_search

    rows = []
    latencies = []
    block_rows = []
    session_rows = []
    session_latencies = []
    half = (len(samples) + 1) // 2
    for number, sample in enumerate(samples):
        started = time.perf_counter()
        scope_id, stored = _import(sample, run_tag)
        out(
            f"  imported {sample['sample_id']}: {len(stored)} turns "
            f"in {time.perf_counter() - started:.1f} s"
        )
        dia_of: dict[int, str] = {}
        if block:
            dia_of = memories_seed(scope_id=scope_id, turns=stored)
        part = "tune" if number < half else "held-out"
        # LoCoMo's questions carry no date: they are asked the day after the last session, as an
        # agent in the conversation would ask them, so "last week" counts from there, whatever
        # the day the bench runs on.
        asked = max(date for _, date in stored.values()) + timedelta(days=1)
        session_name = {
            session_id: _session_of(dia)
            for session_id, dia in ContextTurn.objects.filter(scope_id=scope_id).values_list(
                "session_id", "meta__dia_id"
            )
        }
        for qa in sample["qa"]:
            if progress is not None:
                progress.update(1)
            gold = [dia for dia in evidence_normalise(qa.get("evidence")) if dia in stored]
            if not gold:
                continue
            began = time.perf_counter()
            hits = turn_search(
                query=qa["question"], scope_ids=[scope_id], limit=max(KS), asked_at=asked
            )
            latencies.append((time.perf_counter() - began) * 1000)
            ranked = [hit.turn.meta.get("dia_id") for hit in hits]
            rows.append((qa.get("category"), gold, ranked, part))
            began = time.perf_counter()
            sessions = session_search(
                query=qa["question"], scope_ids=[scope_id], limit=max(SESSION_KS)
            )
            session_latencies.append((time.perf_counter() - began) * 1000)
            session_rows.append(
                (
                    qa.get("category"),
                    {_session_of(dia) for dia in gold},
                    [session_name.get(hit.session.pk) for hit in sessions],
                    part,
                )
            )
            if block:
                searched = memory_search(
                    query=qa["question"], scope_ids=[scope_id], limit=5, asked_at=asked
                )
                shown = block_ranked(query=qa["question"], scope_id=scope_id, asked_at=asked)
                block_rows.append(
                    (
                        qa.get("category"),
                        gold,
                        [dia_of.get(hit.memory.pk) for hit in searched],
                        [dia_of.get(pk) for pk in shown],
                    )
                )
    figures = _figures(rows, latencies)
    figures["halves"] = {
        part: _figures([row for row in rows if row[3] == part], [])
        for part in ("tune", "held-out")
        if any(row[3] == part for row in rows)
    }
    if block_rows:
        figures["block"] = _block_figures(block_rows)
    figures["sessions"] = _session_figures(session_rows, session_latencies)
    return figures


def _session_figures(session_rows, latencies) -> dict:
    """Session-level recall of session_search (gold = the sessions holding evidence), overall, per
    half and per category, and its latency."""

    def recall(subset) -> dict[int, float]:
        return {
            k: _percent([len(gold & set(ranked[:k])) / len(gold) for _, gold, ranked, _ in subset])
            for k in SESSION_KS
        }

    ordered = sorted(latencies) or [0.0]
    return {
        "overall": recall(session_rows),
        "halves": {
            part: recall([row for row in session_rows if row[3] == part])
            for part in ("tune", "held-out")
            if any(row[3] == part for row in session_rows)
        },
        "categories": {
            name: recall([row for row in session_rows if row[0] == number])
            for number, name in CATEGORIES.items()
            if any(row[0] == number for row in session_rows)
        },
        "p50_ms": statistics.median(ordered),
        "p95_ms": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
    }


def _block_figures(block_rows) -> dict:
    def r5(subset, column):
        return _percent([len(set(row[1]) & set(row[column][:5])) / len(row[1]) for row in subset])

    result = {"overall": (r5(block_rows, 2), r5(block_rows, 3))}
    for number, name in CATEGORIES.items():
        subset = [row for row in block_rows if row[0] == number]
        if subset:
            result[name] = (r5(subset, 2), r5(subset, 3))
    return result


def _figures(rows, latencies) -> dict:
    def recalls(subset):
        turn_level = {
            k: _percent([len(set(g) & set(r[:k])) / len(g) for _, g, r, *_ in subset]) for k in KS
        }
        session_level = {}
        # Sessions are ranked by the first appearance of one of their turns in the turn ranking.
        for k in SESSION_KS:
            values = []
            for _, gold, ranked, *_ in subset:
                gold_sessions = {_session_of(dia) for dia in gold}
                sessions = list(dict.fromkeys(_session_of(dia) for dia in ranked if dia))
                values.append(len(gold_sessions & set(sessions[:k])) / len(gold_sessions))
            session_level[k] = _percent(values)
        reciprocal = []
        for _, gold, ranked, *_ in subset:
            rank = next((i for i, dia in enumerate(ranked, start=1) if dia in gold), None)
            reciprocal.append(1.0 / rank if rank else 0.0)
        return turn_level, session_level, _percent(reciprocal)

    overall = recalls(rows)
    per_category = {
        name: recalls([row for row in rows if row[0] == number])
        for number, name in CATEGORIES.items()
        if any(row[0] == number for row in rows)
    }
    ordered = sorted(latencies) or [0.0]
    return {
        "questions": len(rows),
        "overall": overall,
        "categories": per_category,
        "p50_ms": statistics.median(ordered),
        "p95_ms": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
    }


def figures_print(figures: dict, out) -> None:
    recall, session, mrr = figures["overall"]
    out(f"LoCoMo turn-level retrieval: {figures['questions']} scorable questions")
    out("")
    header = f"{'retriever':<34}" + "".join(f"{'R@' + str(k):>7}" for k in KS)
    out(header + "".join(f"{'S@' + str(k):>7}" for k in SESSION_KS) + f"{'MRR':>7}")
    out(
        f"{'Tideline turn_search':<34}"
        + "".join(f"{recall[k]:7.1f}" for k in KS)
        + "".join(f"{session[k]:7.1f}" for k in SESSION_KS)
        + f"{mrr:7.1f}"
    )
    sessions = figures.get("sessions")
    if sessions:
        out(
            f"{'Tideline session_search':<34}"
            + " " * 7 * len(KS)
            + "".join(f"{sessions['overall'][k]:7.1f}" for k in SESSION_KS)
        )
    for name, values in PUBLISHED:
        out(f"{name:<34}" + "".join(f"{value:7.1f}" for value in values))
    out("")
    out(
        f"{'category (n)':<34}"
        + "".join(f"{'R@' + str(k):>7}" for k in KS)
        + f"{'S@5':>7}{'MRR':>7}{'DRAGON R@5':>12}"
    )
    for name, (cat_recall, cat_session, cat_mrr) in figures["categories"].items():
        out(
            f"{name:<34}"
            + "".join(f"{cat_recall[k]:7.1f}" for k in KS)
            + f"{cat_session[5]:7.1f}{cat_mrr:7.1f}{DRAGON_R5[name]:12.1f}"
        )
    for part, half in figures.get("halves", {}).items():
        recall, session, mrr = half["overall"]
        out(
            f"{'conversations, ' + part + ' half (' + str(half['questions']) + ')':<34}"
            + "".join(f"{recall[k]:7.1f}" for k in KS)
            + "".join(f"{session[k]:7.1f}" for k in SESSION_KS)
            + f"{mrr:7.1f}"
        )
        out(
            f"{'  per category R@5':<34}"
            + "  ".join(f"{name} {values[0][5]:.1f}" for name, values in half["categories"].items())
        )
    if sessions:
        out("")
        out(
            f"{'session_search, S@5':<34}"
            + "  ".join(
                f"{name} {values[5]:.1f}"
                for name, values in [*sessions["halves"].items(), *sessions["categories"].items()]
            )
        )
        out(
            f"session_search latency: p50 {sessions['p50_ms']:.1f} ms, "
            f"p95 {sessions['p95_ms']:.1f} ms"
        )
    if "block" in figures:
        out("")
        out(f"{'turns stored as memories (R@5)':<34}{'search':>9}{'block':>9}")
        for name, (searched, shown) in figures["block"].items():
            out(f"{name:<34}{searched:9.1f}{shown:9.1f}")
    out("")
    out(
        f"query latency (turn_search incl. query embedding): p50 {figures['p50_ms']:.1f} ms, "
        f"p95 {figures['p95_ms']:.1f} ms"
    )


def _is_sample(sample) -> bool:
    return (
        isinstance(sample, dict)
        and "sample_id" in sample
        and isinstance(sample.get("conversation"), dict)
        and isinstance(sample.get("qa"), list)
        and all(isinstance(qa, dict) and isinstance(qa.get("question"), str) for qa in sample["qa"])
    )


def run(command, options) -> None:
    path = Path(options["data"])
    if not path.is_file():
        raise CommandError(f"no LoCoMo file at {path}")
    try:
        samples = json.loads(path.read_text())
    except ValueError as exc:
        raise CommandError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(samples, list) or not all(map(_is_sample, samples)):
        raise CommandError(
            f"{path} is not in LoCoMo format (a list of conversations, each with a sample_id, a"
            " conversation object and a qa list of questions)"
        )
    if options["conversations"]:
        samples = samples[: options["conversations"]]
    out = command.stdout.write
    run_tag = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    old_name = None
    if not options["in_place"]:
        out("creating a scratch database (nothing is written to the configured store)…")
        old_name = connection.settings_dict["NAME"]
        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        started = time.perf_counter()
        questions = sum(len(sample["qa"]) for sample in samples)
        bar = command.progress(total=questions, desc="LoCoMo questions", unit="q")
        figures = evaluate(samples, run_tag=run_tag, out=out, block=options["block"], progress=bar)
        bar.close()
        out(f"  total {time.perf_counter() - started:.0f} s")
        out("")
        figures_print(figures, out)
    finally:
        if old_name is not None:
            connection.creation.destroy_test_db(old_name, verbosity=0)
