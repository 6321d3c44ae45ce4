"""What a query asks for, where it changes ranking: a question about a past choice ("why did we
pick X?") prefers decision-layer narratives, the "why we chose X" chains of seed 004; a question
about when something happened prefers turns that place themselves in time (memory/search/timing.py);
a question is answered by what a turn states, not by a turn that asks in turn.

Patterns per language, kept literal: a question word together with a choosing verb, or the noun
phrases that name a decision's reason. False positives only add a small prior to decision rows.
"""

import re
from collections.abc import Callable

import numpy as np
from django.conf import settings

_CHOICE_QUESTIONS = [
    # English: "why did we choose/pick/go with …", "what did we decide", "reason we use …"
    r"\bwhy\b.{0,40}\b(choose|chose|chosen|pick|picked|go with|went with|decide|decided|opt|"
    r"opted|switch|switched|prefer|preferred|use|used|settle|settled|instead of)\b",
    r"\bwhat (did|have) (we|you|i|they) (decide|decided|choose|chose|pick|picked)\b",
    r"\b(reason|rationale|reasoning) (for|behind|why)\b",
    r"\bhow did (we|you|i|they) (decide|choose|end up)\b",
    # Chinese: 为什么选/用/决定/改用/换成, 为何, 当初/当时怎么决定, 选择…的原因/理由
    r"(为什么|为何|怎么|干嘛).{0,12}(选|用|决定|改用|换成|采用|定了)",
    r"(选择|决定|选用|采用).{0,12}(原因|理由|依据)",
    r"(当初|当时).{0,6}(为什么|怎么|为何)",
    # Japanese: なぜ/どうして…選んだ/決めた/採用/使う, 選んだ理由, 決めた理由
    r"(なぜ|どうして|何で|なんで).{0,40}(選|決め|採用|使う|使った|にした)",
    r"(選んだ|決めた|採用した|にした)(理由|わけ)",
    # Spanish: por qué elegimos/escogimos/decidimos/usamos/optamos…, qué decidimos, la razón de
    r"\bpor ?qu[ée]\b.{0,40}\b(eleg|escog|decid|opt|us[aáée]|cambi|prefer|nos qued)",
    r"\bqu[ée] (decidimos|elegimos|escogimos)\b",
    r"\b(raz[oó]n|motivo) (de|por la que|por el que|para)\b",
]
_CHOICE = re.compile("|".join(f"(?:{pattern})" for pattern in _CHOICE_QUESTIONS), re.IGNORECASE)


def asks_about_choice(query: str) -> bool:
    """Whether the query asks why, or what, something was chosen or decided."""
    return bool(_CHOICE.search(query))


_WHEN_QUESTIONS = [
    # English: "when did/is/will …", "what date/day/year …", "which month …", "how long ago".
    # "when" alone is not enough: dialogue-length queries say "when I was debugging …".
    r"\bwhen (did|does|do|is|was|were|are|will|would|has|have|had|can|could|should)\b",
    r"\b(which|what) (year|month|day|date|week)\b",
    r"\bhow long ago\b",
    # How much time lies between two events: answered by the turns that date them. How long one
    # thing lasted ("how long did the hike take") is not: it is said in the thing's own words.
    r"\bhow long (has|had) it been\b",
    r"\bhow (many|much) (days|weeks|months|years|time) (have |had )?passed\b",
    r"\bhow long did it take\b",
    r"\bhow long did\b.{0,60}\b(before|until)\b",
    r"\bafter how (many|much|long)\b",
    # Chinese: 什么时候, 何时, 哪天/哪一天, 哪年/哪一年, 哪个月, 几月几号/几号
    r"什么时候|何时|哪一?天|哪一?年|哪个月|几月几[号日]|几号",
    # Japanese: いつ (not いつも, "always"), 何日, 何年, 何月
    r"いつ(?!も)|何日|何年|何月",
    # Spanish: cuándo, qué día/fecha, en qué año/mes
    r"\bcu[áa]ndo\b",
    r"\bqu[ée] (d[íi]a|fecha)\b",
    r"\ben qu[ée] (a[ñn]o|mes)\b",
]
_WHEN = re.compile("|".join(f"(?:{pattern})" for pattern in _WHEN_QUESTIONS), re.IGNORECASE)


def asks_when(query: str) -> bool:
    """Whether the query asks when something happened or will happen."""
    return bool(_WHEN.search(query))


# A text that ends by asking something ("What made you try pottery?"), in Latin or CJK punctuation.
# PostgreSQL runs the same pattern over a turn's content (memory/search/postgres.py).
QUESTION_END = r"[?？]\s*$"
_QUESTION_END = re.compile(QUESTION_END)


def ends_asking(text: str) -> bool:
    """Whether `text` (a query, or a turn's own text) ends with a question."""
    return bool(_QUESTION_END.search(text or ""))


# A question that opens by asking how many, how much, how long or how often is answered by a turn
# that states a number ("we've been married 5 years", "twice a week"); one that opens by asking
# where, by a turn that names something ("we went camping in Yosemite"). Only the opening counts: a
# dialogue-length query says "how much I have to do" or "where I can use these" in passing.
# Chinese and Japanese put the question word anywhere and write no capitals, and nothing here
# measures them, so they are not read.
_NUMBER_QUESTIONS = [
    r"^\W*how (many|much|long|often)\b(?! ago)",
    r"^\W*(en )?cu[áa]nt[oa]s?\b",
]
_PLACE_QUESTIONS = [
    # "Where are we with the plan?" and "where do I start?" ask how far the work got, not a place.
    r"^\W*where (?!(are|were) we\b|(do|did|should|shall|can) (we|i) (start|begin|stand|leave|"
    r"left|go from here)\b)(did|does|do|is|was|were|are|will|would|has|have|had|can|could|should)\b",
    r"^\W*(in )?(which|what) (city|cities|country|countries|state|states|town|place|places)\b",
    r"^\W*(en |a |de )?d[óo]nde\b",
    r"^\W*(en )?qu[ée] (ciudad|pa[íi]s|lugar)\b",
]
_NUMBER = re.compile("|".join(f"(?:{pattern})" for pattern in _NUMBER_QUESTIONS), re.IGNORECASE)
_PLACE = re.compile("|".join(f"(?:{pattern})" for pattern in _PLACE_QUESTIONS), re.IGNORECASE)


def asks_for_number(query: str) -> bool:
    """Whether the query opens by asking how many, how much, how long or how often."""
    return bool(_NUMBER.search(query))


def asks_for_place(query: str) -> bool:
    """Whether the query opens by asking where, or which city, country or place."""
    return bool(_PLACE.search(query))


def answer_priors(
    *, query: str, number_flags: np.ndarray, name_flags: np.ndarray
) -> Callable[[np.ndarray], np.ndarray] | None:
    """`TIDELINE_SEARCH_PRIOR_ANSWER` over a table's rows (turns or memories) for the rows that hold
    the kind of answer `query` opens by asking for (their states_number and names_proper flags),
    or None when it asks for neither."""
    weight = np.float32(settings.TIDELINE_SEARCH_PRIOR_ANSWER)
    flags = [
        column
        for asks_for, column in ((asks_for_number, number_flags), (asks_for_place, name_flags))
        if asks_for(query)
    ]
    if not weight or not flags:
        return None

    def priors(rows: np.ndarray) -> np.ndarray:
        return weight * sum(column[rows].astype(np.float32) for column in flags)

    return priors


# A turn states a number when it holds a digit or a number word; it names something when a
# capitalised word follows a lower-case word or a comma inside a sentence (a sentence's first word
# and "I" do not count). PostgreSQL runs the same patterns over a turn's content
# (memory/search/postgres.py): the first case-insensitively (~*), the second as written (~).
STATES_NUMBER = (
    r"[0-9]|(^|[^a-z])(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|"
    r"twenty|thirty|forty|fifty|hundred|thousand|dozen|couple|few|several|once|twice|dos|tres|"
    r"cuatro|cinco|seis|siete|ocho|nueve|diez|doce|veinte|treinta|cien|mil|docena|veces)([^a-z]|$)"
)
NAMES_PROPER = r"[a-z,;:] +[A-Z][a-z]"
_STATES_NUMBER = re.compile(STATES_NUMBER, re.IGNORECASE)
_NAMES_PROPER = re.compile(NAMES_PROPER)


def states_number(text: str) -> bool:
    """Whether `text` (a turn's own text) holds a number, in digits or in words."""
    return bool(_STATES_NUMBER.search(text or ""))


def names_proper(text: str) -> bool:
    """Whether `text` (a turn's own text) names something with a capitalised word mid-sentence."""
    return bool(_NAMES_PROPER.search(text or ""))
