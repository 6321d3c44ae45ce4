"""What the user says becomes a memory only when it says something: small talk ("hi", "sounds
good", "continue", "好的，继续吧", "了解です") is conversation, and one session repeating itself is
not a second observation. Short real preferences are still captured."""

import pytest

from memory.models import Fact, InboxItem, InboxStatus, Memory, MemoryStatus, Narrative
from memory.services.gate import GateReason, gate_rules
from memory.services.inbox import (
    INBOX_MAX_CHARS,
    RULE_PROFILE_CONFIDENCE,
    inbox_capture,
    inbox_extract_rules,
    inbox_flush,
)
from memory.services.timeline import session_start

SMALL_TALK = [
    # en
    "hi",
    "hello",
    "lol",
    "hmm",
    "hmmmm",
    "continue",
    "go on",
    "sounds good",
    "nice",
    "ok, thanks!",
    "the of and",
    "hahaha",
    "a" * 100_000,
    "word " * 19_999,
    # es
    "hola",
    "perfecto, gracias",
    "sigue",
    "jajaja",
    # zh
    "你好",
    "继续",
    "好的，继续吧",
    "哈哈哈",
    "收到",
    "数据库" * 33_000,
    # ja
    "はい、わかりました",
    "了解です",
    "続けて",
    "ありがとうございます",
]
PREFERENCES = {
    "I prefer tabs": "The user prefers tabs",
    "我喜欢喝咖啡": "用户喜欢喝咖啡",
    "コーヒーが好き": "ユーザーはコーヒーが好き",
    "prefiero el té": "El usuario prefiere el té",
}


@pytest.mark.parametrize("text", SMALL_TALK, ids=lambda text: text[:20])
def test_it_refuses_small_talk_as_a_memory_in_four_languages(text):
    assert gate_rules(text=text).reason == GateReason.EMPTY_PHRASE


def test_it_extracts_short_preferences_but_no_small_talk():
    said = {
        candidate.text
        for text in [*SMALL_TALK, "this is wrong", "ok sounds good", *PREFERENCES]
        for candidate in inbox_extract_rules(text)
    }

    assert said == set(PREFERENCES.values())
    assert all(gate_rules(text=text).passed for text in [*PREFERENCES, *PREFERENCES.values()])


def test_it_captures_preferences_and_passes_over_small_talk(project_scope):
    session = session_start(runtime="test", external_id="s-1", scope_id=project_scope.pk)
    small_talk = [text for text in SMALL_TALK if len(text) <= INBOX_MAX_CHARS]
    for text in [*small_talk, *PREFERENCES]:
        inbox_capture(content=text, session_id=session.pk)

    report = inbox_flush()

    assert (report.processed, report.skipped) == (len(PREFERENCES), len(small_talk))
    captured = Narrative.objects.filter(status=MemoryStatus.CANDIDATE)
    assert sorted(captured.values_list("gesture", flat=True)) == sorted(PREFERENCES.values())
    assert Memory.objects.count() == len(PREFERENCES)


def test_it_does_not_promote_what_one_session_repeats(project_scope):
    first = session_start(runtime="test", external_id="s-1", scope_id=project_scope.pk)
    inbox_capture(content="archive-manager keeps its index in SQLite", session_id=first.pk)
    inbox_capture(content="archive-manager keeps its index in SQLite.", session_id=first.pk)
    inbox_capture(
        content="I prefer tabs. I prefer tabs! archive-manager keeps its index in SQLite",
        session_id=first.pk,
    )
    inbox_flush()

    index, tabs = (Narrative.objects.get(gesture__startswith=text) for text in ("arch", "The"))
    assert [index.status, tabs.status] == [MemoryStatus.CANDIDATE, MemoryStatus.CANDIDATE]
    repeated = InboxItem.objects.filter(session=first).order_by("pk")[2]
    assert repeated.result["repeats"] == [tabs.pk, index.pk]
    assert repeated.status == InboxStatus.PROCESSED

    # Another session saying it is a second observation, and promotes it.
    later = session_start(runtime="test", external_id="s-2", scope_id=project_scope.pk)
    inbox_capture(content="archive-manager keeps its index in SQLite", session_id=later.pk)
    inbox_flush()

    index.refresh_from_db()
    assert index.status == MemoryStatus.ACTIVE


def test_it_does_not_count_a_fact_one_session_restates_as_support(project_scope):
    session = session_start(runtime="test", external_id="s-1", scope_id=project_scope.pk)
    for text in ("我叫李雷。", "我叫李雷。我是一名后端工程师。"):
        inbox_capture(content=text, session_id=session.pk)

    inbox_flush()

    name = Fact.objects.get(predicate="name", status=MemoryStatus.ACTIVE)
    assert name.confidence == RULE_PROFILE_CONFIDENCE
    assert InboxItem.objects.order_by("pk").last().result["repeats"] == [name.pk]


@pytest.mark.parametrize(
    "said", ["I'm vegetarian", "I’m left-handed", "Soy zurdo", "我是左撇子", "東京在住です"]
)
def test_it_captures_one_word_said_of_oneself(said):
    """Before, "I'm vegetarian" had one content word, below capture's two, and was passed over."""
    assert inbox_extract_rules(said)


def test_it_does_not_take_a_japanese_self_description_for_the_users_name(project_scope):
    """Before, 私は猫派です became name = 猫派 and replaced the user's real name."""
    session = session_start(runtime="test", external_id="s-1", scope_id=project_scope.pk)
    inbox_capture(content="私の名前は田中です", session_id=session.pk)
    inbox_capture(content="私は猫派です", session_id=session.pk)
    inbox_flush()

    names = Fact.objects.filter(predicate="name").values_list("value", "status")
    assert list(names) == [("田中", MemoryStatus.ACTIVE)]
