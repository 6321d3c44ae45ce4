"""The write gate (seed 003): before anything is stored, three questions and three hard checks.

1. Readable without context? Colloquial fragments — trailing-off ellipses, pasted "：结论：" chains,
   sentences that open with "also / and / 也 / それから / también" — mean nothing on their own.
2. Subject clear? "当前插件要小心" — which plugin? A demonstrative + generic noun ("this plugin",
   "この プロジェクト", "este proyecto") with no name anywhere in the memory names nothing.
3. A fact, not an instruction? "你自己改完之后" is work for the assistant, not something true about
   the world.

Hard checks: predicate `[a-z][a-z0-9_]{1,40}`, value ≤ 60 characters, not an empty phrase ("要小心",
"be careful"). The questions are asked in that order (readability first: a fragment that also
lacks a subject is, first of all, a fragment). Rules cover Chinese, Japanese, Spanish and English.

An LLM judge can replace the rules for the three questions (settings.TIDELINE_GATE_USE_LLM); any
LLM failure — unavailable, timeout, HTTP error, invalid JSON, an answer outside the allowed set —
falls back to the rules. Secret memories are never sent to the LLM.
"""

import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum

from memory.models import Actor
from memory.models.memories import FACT_VALUE_MAX_CHARS, PREDICATE_PATTERN
from memory.services.llm import LLMUnavailable, llm_complete_json


class GateReason(StrEnum):
    PASSED = "passed"
    NO_CONTEXT = "no-context"
    NO_SUBJECT = "no-subject"
    INSTRUCTION = "instruction"
    EMPTY_PHRASE = "empty-phrase"
    BAD_PREDICATE = "bad-predicate"
    VALUE_TOO_LONG = "value-too-long"


REASON_MESSAGES = {
    GateReason.PASSED: "passed the write gate",
    GateReason.NO_CONTEXT: "not readable out of context (a conversational fragment)",
    GateReason.NO_SUBJECT: "subject unclear: it says 'this/the current …' but never names which",
    GateReason.INSTRUCTION: "an instruction to the assistant, not a fact",
    GateReason.EMPTY_PHRASE: "an empty phrase with nothing to remember",
    GateReason.BAD_PREDICATE: "predicate must match [a-z][a-z0-9_]{1,40}",
    GateReason.VALUE_TOO_LONG: f"value is longer than {FACT_VALUE_MAX_CHARS} characters",
}

# The three questions an LLM judge may answer; hard checks stay deterministic.
LLM_REASONS = (
    GateReason.PASSED,
    GateReason.NO_CONTEXT,
    GateReason.NO_SUBJECT,
    GateReason.INSTRUCTION,
    GateReason.EMPTY_PHRASE,
)


@dataclass(frozen=True)
class GateVerdict:
    reason: GateReason
    judge: str = Actor.RULE
    evidence: str = ""

    @property
    def passed(self) -> bool:
        return self.reason == GateReason.PASSED

    @property
    def message(self) -> str:
        text = f"gate ({self.judge}): {self.reason} — {REASON_MESSAGES[self.reason]}"
        return f"{text}: «{self.evidence}»" if self.evidence else text


_PREDICATE = re.compile(PREDICATE_PATTERN)

# Ellipses (trailing off or cutting in), and chains of colons from a pasted half-thought.
_ELLIPSIS = re.compile(r"…|\.{3}|。。。|・・・")
_COLONS = re.compile(r"[:：]")
_OPENING_CONNECTIVE = re.compile(
    r"^(?:"
    r"也|还有|另外|然后|所以|但是|不过|而且|那就|那么|就是说|对了|嗯|啊|呃"
    r"|それから|それで|また|でも|だから|あと|ちなみに|じゃあ|なので"
    r"|(?:y|también|además|pero|entonces|así que|o sea|bueno|pues)\b"
    r"|(?:also|and|but|so|then|plus|anyway|btw|as well|or)\b"
    r")",
    re.IGNORECASE,
)

_GENERIC_NOUNS_ZH = "插件|项目|工程|仓库|库|文件|函数|模块|服务|系统|程序|脚本|接口|版本|组件|工具|代码|问题|方案|功能"
_GENERIC_NOUNS_JA = "プラグイン|プロジェクト|リポジトリ|ファイル|関数|モジュール|サービス|システム|プログラム|スクリプト|バグ|問題|ツール|コード|ライブラリ|機能"
_GENERIC_NOUNS_ES = "plugin|proyecto|repositorio|repo|archivo|fichero|función|módulo|servicio|sistema|programa|script|error|herramienta|código|librería|biblioteca|app|aplicación"
_GENERIC_NOUNS_EN = "plugin|project|repo|repository|file|function|module|service|system|program|script|bug|tool|code|library|app|feature"
_DEICTIC = re.compile(
    rf"(?:当前|目前|这个|那个|这款|那款|该|此|本)\s*(?:{_GENERIC_NOUNS_ZH})"
    rf"|(?:この|その|あの|現在の|今の|当該の?)\s*(?:{_GENERIC_NOUNS_JA})"
    rf"|\b(?:este|esta|ese|esa|aquel|aquella)\s+(?:{_GENERIC_NOUNS_ES})\b"
    rf"|\b(?:el|la)\s+(?:{_GENERIC_NOUNS_ES})\s+actual\b"
    rf"|\b(?:this|that|the current|the said|current)\s+(?:{_GENERIC_NOUNS_EN})\b",
    re.IGNORECASE,
)
_PRONOUN_SUBJECTS = {
    "它",
    "它们",
    "这",
    "那",
    "这个",
    "那个",
    "this",
    "that",
    "it",
    "they",
    "these",
    "those",
    "esto",
    "eso",
    "ello",
    "それ",
    "これ",
    "あれ",
    "当前插件",
    "当前项目",
}
# A name: an identifier with - _ . / inside (archive-manager, v2.1, src/app.py), CamelCase,
# something quoted, or a capitalised word that is not the first word of the sentence.
_NAME = re.compile(
    r"[A-Za-z0-9][\w+]*[-_./][\w+][\w.+/-]*"
    r"|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z]+[A-Z]\w*"
    r"|[「『“\"'`《][^」』”\"'`》]{2,}[」』”\"'`》]"
)
_CAPITALISED = re.compile(r"(?<=[\s,;(（、，])([A-Z][\w-]+)")
_LATIN_WORD_IN_CJK = re.compile(r"[A-Za-z][A-Za-z0-9]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")

_INSTRUCTION = re.compile(
    r"^(?:"
    r"(?:你|您)(?!是|叫|好)|请|帮我|帮忙|麻烦|记得|别忘了|不要|别再|务必|赶紧"
    r"|(?:あなた|君|きみ)は?|まず.*して|次に.*して"
    r"|(?:por favor|recuerda|no olvides|haz|revisa|cambia|corrige|arregla|comprueba"
    r"|asegúrate|puedes|podrías|debes|tienes que|tú|usted)\b"
    r"|(?:please|remember to|don't forget|make sure|you should|you need to|you must|can you"
    r"|could you|go ahead|let's|fix|change|check|run|update|review|try)\b"
    r"|you\b(?!'re| are| were)"
    r")",
    re.IGNORECASE,
)
_INSTRUCTION_END = re.compile(
    r"(?:してください|して下さい|しなさい|してね|しろ|せよ|お願いします?)[。！!]?$"
)

_EMPTY_PHRASES = {
    # zh
    "要小心",
    "小心",
    "注意",
    "注意一下",
    "要注意",
    "小心点",
    "好的",
    "好",
    "嗯",
    "知道了",
    "收到",
    "没问题",
    "可以",
    "行",
    "对",
    "是的",
    "谢谢",
    # ja
    "気をつけて",
    "注意して",
    "了解",
    "わかりました",
    "はい",
    "ありがとう",
    # es
    "ten cuidado",
    "cuidado",
    "vale",
    "de acuerdo",
    "gracias",
    "sí",
    "entendido",
    # en
    "be careful",
    "careful",
    "ok",
    "okay",
    "got it",
    "thanks",
    "sure",
    "yes",
    "noted",
    "fine",
}
_PUNCTUATION_EDGES = " \t\r\n。．.!！?？,，、;；:：~～-—「」『』\"'“”()（）[]【】"


def _clean(text: str) -> str:
    return unicodedata.normalize("NFKC", text or "").strip()


def _has_name(text: str) -> bool:
    if _NAME.search(text) or _CAPITALISED.search(text):
        return True
    # In Chinese or Japanese text any Latin word is a name (DSH, Redis, neovim).
    return bool(_CJK.search(text) and _LATIN_WORD_IN_CJK.search(text))


def _is_empty_phrase(text: str) -> bool:
    core = _DEICTIC.sub("", text).strip(_PUNCTUATION_EDGES).casefold()
    core = re.sub(r"\s+", " ", core)
    return not core or core in _EMPTY_PHRASES


def _fragment(text: str) -> str:
    if match := _ELLIPSIS.search(text):
        return match.group(0)
    if len(_COLONS.findall(text)) >= 2:
        return text
    if match := _OPENING_CONNECTIVE.match(text):
        return match.group(0)
    return ""


def _unclear_subject(text: str, subject: str | None) -> str:
    if subject is not None:
        cleaned = _clean(subject).casefold().strip(_PUNCTUATION_EDGES)
        if not cleaned or cleaned in _PRONOUN_SUBJECTS or _DEICTIC.fullmatch(cleaned):
            return subject
        return ""
    if _has_name(text):
        return ""
    if match := _DEICTIC.search(text):
        return match.group(0)
    first = re.split(r"[\s,，、]", text, maxsplit=1)[0].casefold()
    if first in _PRONOUN_SUBJECTS:
        return first
    return ""


def _instruction(text: str) -> str:
    if match := _INSTRUCTION.match(text):
        return match.group(0)
    if match := _INSTRUCTION_END.search(text):
        return match.group(0)
    return ""


def gate_rules(*, text: str, subject: str | None = None) -> GateVerdict:
    """The three questions by rule, then the empty-phrase check. `subject` is who a fact is about
    (its profile); narratives pass None and must name their subject in the text."""
    text = _clean(text)
    if evidence := _fragment(text):
        return GateVerdict(GateReason.NO_CONTEXT, evidence=evidence[:80])
    if evidence := _unclear_subject(text, subject):
        return GateVerdict(GateReason.NO_SUBJECT, evidence=evidence[:80])
    if evidence := _instruction(text):
        return GateVerdict(GateReason.INSTRUCTION, evidence=evidence[:80])
    if _is_empty_phrase(text):
        return GateVerdict(GateReason.EMPTY_PHRASE, evidence=text[:80])
    return GateVerdict(GateReason.PASSED)


def gate_hard_checks(*, predicate: str | None = None, value: str | None = None) -> GateVerdict:
    if predicate is not None and not _PREDICATE.fullmatch(predicate):
        return GateVerdict(GateReason.BAD_PREDICATE, evidence=str(predicate)[:80])
    if value is not None and len(value.strip()) > FACT_VALUE_MAX_CHARS:
        return GateVerdict(GateReason.VALUE_TOO_LONG, evidence=value[:80])
    return GateVerdict(GateReason.PASSED)


_JUDGE_SYSTEM = (
    "You are the write gate of a long-term memory store. Decide whether one candidate memory "
    "is worth storing. Reject it if it is not readable out of context (a conversational "
    "fragment), if its subject is unclear (says 'this plugin' without naming which), if it is "
    "an instruction to the assistant rather than a fact, or if it is an empty phrase. Answer "
    'only a JSON object: {"reason": one of "passed", "no-context", "no-subject", '
    '"instruction", "empty-phrase"}.'
)


def _gate_llm(*, text: str, subject: str | None) -> GateVerdict | None:
    user = f"Subject: {subject}\nCandidate: {text}" if subject is not None else f"Candidate: {text}"
    try:
        reply = llm_complete_json(system=_JUDGE_SYSTEM, user=user)
    except LLMUnavailable:
        return None
    reason = reply.data.get("reason")
    if not isinstance(reason, str) or reason not in {str(item) for item in LLM_REASONS}:
        return None
    return GateVerdict(GateReason(reason), judge=Actor.LLM)


def gate_check(
    *,
    text: str,
    subject: str | None = None,
    predicate: str | None = None,
    value: str | None = None,
    use_llm: bool = False,
) -> GateVerdict:
    """Judge one candidate: hard checks first (always by rule), then the three questions by the
    LLM when asked and available, else by rule. Call it outside any database transaction."""
    hard = gate_hard_checks(predicate=predicate, value=value)
    if not hard.passed:
        return hard
    if use_llm and (verdict := _gate_llm(text=_clean(text), subject=subject)) is not None:
        return verdict
    return gate_rules(text=text, subject=subject)
