"""A learned linear re-ranker over turn_search's top 50 on LoCoMo: is the hand-set fusion leaving
recall on the table? (issue 14; measured, not taken: tools/recall/README.md.)

    TIDELINE_DATA_DIR=/work/scratch/recall/tune nice -n 19 .venv/bin/python tools/recall/rerank.py

Reads tune.py's store (run `tune.py '{}'` first). For every question, each of turn_search's best
50 turns becomes one row of features: its fused score and the score's parts (lexical, semantic,
keyword, priors), raw BM25 and cosine, rank and cosine rank, the share of the question's terms its
own text holds (not its neighbours'), whether it asks a question, its length, its best neighbour's
score (within one turn, among the 50), its session's count and best score among the 50, and
whether its speaker is named in the question; the label is whether it is a gold turn. A logistic
regression (class-balanced, standardised features) is fitted on one half of the conversations and
re-ranks the other, both ways round. Prints R@5 / R@10 of turn_search's own order and of the
re-ranked order on the half not fitted (gold turns outside the 50 count as missed).
"""

import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideline_site.settings")
import django

django.setup()
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from memory.bench import locomo
from memory.models import ContextTurn, Scope
from memory.search import turn_search
from memory.search.text import text_terms

DATA = Path(__file__).resolve().parents[3] / "shared/bench/locomo/locomo10.json"
DEPTH = 50
# Feature sets: the fused score with the turn's own-text evidence, and everything.
OWN = ["score", "own_share", "own_any", "asks", "length", "speaker_named"]
FEATURES = [
    *OWN,
    "lexical",
    "semantic",
    "keyword",
    "priors",
    "bm25",
    "cosine",
    "rank",
    "cosine_rank",
    "neighbour_best",
    "session_count",
    "session_best",
]


def question_rows(question: str, scope_id: int, speakers: set[str]) -> tuple[list, list]:
    """(features, dia_id) of each of the question's best DEPTH turns."""
    hits = turn_search(query=question, scope_ids=[scope_id], limit=DEPTH)
    terms = set(text_terms(question))
    named = {s for s in speakers if re.search(rf"\b{re.escape(s)}\b", question.lower())}
    scores = np.array([hit.score for hit in hits])
    cosines = np.array([hit.why.get("cosine") or 0.0 for hit in hits])
    cosine_rank = (-cosines).argsort().argsort()
    sessions = np.array([hit.turn.session_id for hit in hits])
    dia_ids = [hit.turn.meta.get("dia_id", "") for hit in hits]
    positions = np.array([int(d.split(":")[1]) if ":" in d else -9 for d in dia_ids])
    rows = []
    for rank, hit in enumerate(hits):
        own = set(text_terms(hit.turn.content)) & terms
        same = sessions == sessions[rank]
        near = same & (np.abs(positions - positions[rank]) == 1)
        boosts = hit.why.get("boosts", {})
        values = {
            "score": hit.score,
            "own_share": len(own) / max(1, len(terms)),
            "own_any": float(bool(own)),
            "asks": float(hit.turn.content.strip().endswith("?")),
            "length": float(np.log1p(len(hit.turn.content.split()))),
            "speaker_named": float((hit.turn.speaker or "").lower() in named),
            "lexical": hit.why.get("lexical_share", 0.0),
            "semantic": hit.why.get("semantic_share", 0.0),
            "keyword": boosts.get("keyword", 0.0),
            "priors": boosts.get("priors", 0.0),
            "bm25": hit.why.get("lexical_score", 0.0),
            "cosine": cosines[rank],
            "rank": rank,
            "cosine_rank": cosine_rank[rank],
            "neighbour_best": float(scores[near].max()) if near.any() else 0.0,
            "session_count": float(same.sum()),
            "session_best": float(scores[same].max()),
        }
        rows.append([values[name] for name in FEATURES])
    return rows, dia_ids


def recall(scores: np.ndarray, labels: np.ndarray, question: np.ndarray, gold: list, k: int):
    shares = []
    for q in np.unique(question):
        at = question == q
        order = np.argsort(-scores[at], kind="stable")
        shares.append(labels[at][order][:k].sum() / gold[q])
    return 100 * float(np.mean(shares))


def main() -> None:
    scopes = {
        scope.key.rsplit("/", 1)[1]: scope.pk
        for scope in Scope.objects.filter(key__startswith="bench/locomo/")
    }
    features, labels, question, half, gold = [], [], [], [], []
    for number, sample in enumerate(json.loads(DATA.read_text())):
        scope_id = scopes[sample["sample_id"]]
        speakers = {
            name.lower()
            for name in ContextTurn.objects.filter(scope_id=scope_id)
            .values_list("speaker", flat=True)
            .distinct()
        }
        for qa in sample["qa"]:
            evidence = set(locomo.evidence_normalise(qa.get("evidence")))
            if not evidence:
                continue
            rows, dia_ids = question_rows(qa["question"], scope_id, speakers)
            features += rows
            labels += [float(d in evidence) for d in dia_ids]
            question += [len(gold)] * len(rows)
            half += [number >= 5] * len(rows)
            gold.append(len(evidence))
    features, labels = np.array(features), np.array(labels)
    question, half = np.array(question), np.array(half)
    for fitted, label in ((False, "tune half (0-4) -> held-out (5-9)"), (True, "held-out -> tune")):
        fit, test = half == fitted, half != fitted
        own_order = features[:, FEATURES.index("score")]
        print(
            f"{label}: turn_search R@5 {recall(own_order[test], labels[test], question[test], gold, 5):.1f}"
            f" R@10 {recall(own_order[test], labels[test], question[test], gold, 10):.1f}"
        )
        for name, chosen in (("own-text features", OWN), ("all features", FEATURES)):
            columns = [FEATURES.index(feature) for feature in chosen]
            scaler = StandardScaler().fit(features[fit][:, columns])
            model = LogisticRegression(max_iter=2000, class_weight="balanced")
            model.fit(scaler.transform(features[fit][:, columns]), labels[fit])
            learned = model.decision_function(scaler.transform(features[test][:, columns]))
            print(
                f"  re-ranked, {name}: R@5 {recall(learned, labels[test], question[test], gold, 5):.1f}"
                f" R@10 {recall(learned, labels[test], question[test], gold, 10):.1f}"
            )


if __name__ == "__main__":
    main()
