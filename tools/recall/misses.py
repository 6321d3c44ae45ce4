"""LoCoMo questions whose gold turns are not all in turn_search's top 10, read off tune.py's store.

    TIDELINE_DATA_DIR=/work/scratch/recall/tune .venv/bin/python tools/recall/misses.py [tune|held-out]

Prints how many questions miss, by category, then (in a fixed shuffled order) each question with
every gold turn's rank (None: not in the top 50) and the three best turns. Reading these is how the
turn priors were found; run tune.py '{}' first to import the store.
"""

import json
import os
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideline_site.settings")
import django

django.setup()
from memory.bench import locomo
from memory.models import ContextTurn, Scope
from memory.search import turn_search

DATA = Path(__file__).resolve().parents[3] / "shared/bench/locomo/locomo10.json"
SHOWN = 40


def main(half: str) -> None:
    samples = json.loads(DATA.read_text())
    chosen = samples[:5] if half == "tune" else samples[5:]
    scopes = {
        scope.key.rsplit("/", 1)[1]: scope.pk
        for scope in Scope.objects.filter(key__startswith="bench/locomo/")
    }
    misses = []
    for sample in chosen:
        scope_id = scopes[sample["sample_id"]]
        text = {
            turn.meta.get("dia_id"): f"{turn.speaker}: {turn.content}"
            for turn in ContextTurn.objects.filter(scope_id=scope_id)
        }
        for qa in sample["qa"]:
            gold = [d for d in locomo.evidence_normalise(qa.get("evidence")) if d in text]
            if not gold:
                continue
            hits = turn_search(query=qa["question"], scope_ids=[scope_id], limit=50)
            ranked = [hit.turn.meta.get("dia_id") for hit in hits]
            if all(dia in ranked[:10] for dia in gold):
                continue
            golds = [
                (dia, ranked.index(dia) + 1 if dia in ranked else None, text[dia][:160])
                for dia in gold
            ]
            best = [text[dia][:120] for dia in ranked[:3]]
            category = locomo.CATEGORIES.get(qa.get("category"), "?")
            misses.append((category, qa["question"], golds, best))
    random.Random(1).shuffle(misses)
    print(f"{len(misses)} questions with a gold turn outside the top 10")
    print(Counter(category for category, *_ in misses))
    for category, question, golds, best in misses[:SHOWN]:
        print(f"\n[{category}] {question}")
        for dia, rank, words in golds:
            print(f"   gold {dia} rank {rank}: {words}")
        for words in best:
            print(f"   top: {words}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tune")
