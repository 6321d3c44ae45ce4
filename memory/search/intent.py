"""What a query asks for, where it changes ranking: a question about a past choice ("why did we
pick X?") prefers decision-layer narratives, the "why we chose X" chains of seed 004; a question
about when something happened prefers turns that place themselves in time (memory/search/timing.py);
a question is answered by what a turn states, not by a turn that asks in turn.

Patterns per language, kept literal: a question word together with a choosing verb, or the noun
phrases that name a decision's reason. False positives only add a small prior to decision rows.
"""

import re

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
