import pytest

from memory.models import AuditEvent, Fact, FactKind, MemoryStatus, Narrative
from memory.services.facts import FactInput, fact_write
from memory.services.gate import GateReason, gate_check, gate_rules
from memory.services.narratives import NarrativeInput, narrative_write
from tests.fakes.llm_server import json_answer, slow_answer, status_answer, text_answer
from tests.lifecycle.conftest import integrity_ok

JUNK = [
    ("当前插件要小心", GateReason.NO_SUBJECT),
    ("也可以自检一遍安全相关问题…：综合结论：当前插件不建议…", GateReason.NO_CONTEXT),
    ("你自己改完之后", GateReason.INSTRUCTION),
]

NORMAL = [
    "archive-manager 存在路径穿越漏洞，需要修复",
    "用户希望回复用简体中文",
    "用户写代码用 neovim",
    "DSH 装在 D:/tools/dsh，数据目录在 ~/.dsh",
    "Tideline のテストは pytest で動く",
    "ユーザーは日本語で返事してほしい",
    "El usuario prefiere respuestas en español",
    "El proyecto billing-service usa PostgreSQL 16",
    "The archive-manager plugin shipped v2.1 after the path traversal fix",
    "The user prefers dark mode in every editor",
]


@pytest.mark.parametrize(("text", "reason"), JUNK)
def test_it_names_the_right_reason_for_each_junk_memory(text, reason):
    assert gate_rules(text=text).reason == reason


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("This plugin has a bug", GateReason.NO_SUBJECT),
        ("このプラグインは危ない", GateReason.NO_SUBJECT),
        ("Este proyecto tiene un error", GateReason.NO_SUBJECT),
        ("and then the other one...", GateReason.NO_CONTEXT),
        ("それから、あれも", GateReason.NO_CONTEXT),
        ("y también lo otro", GateReason.NO_CONTEXT),
        ("Please fix the failing tests", GateReason.INSTRUCTION),
        ("テストを実行してください", GateReason.INSTRUCTION),
        ("Revisa el código antes del viernes", GateReason.INSTRUCTION),
        ("要小心", GateReason.EMPTY_PHRASE),
        ("be careful!", GateReason.EMPTY_PHRASE),
        ("気をつけて", GateReason.EMPTY_PHRASE),
        ("ten cuidado", GateReason.EMPTY_PHRASE),
    ],
)
def test_it_applies_the_three_questions_in_four_languages(text, reason):
    assert gate_rules(text=text).reason == reason


def test_it_runs_the_hard_checks_on_predicate_value_and_empty_phrases():
    assert gate_check(text="x", predicate="Bad-Key", value="x").reason == GateReason.BAD_PREDICATE
    assert gate_check(text="v", predicate="ok_key", value="v" * 61).reason == (
        GateReason.VALUE_TOO_LONG
    )
    assert gate_check(text="v" * 60, predicate="ok_key", value="v" * 60).passed
    # A named subject (the fact's profile) does not rescue an empty phrase.
    assert gate_rules(text="当前插件要小心", subject="archive-manager").reason == (
        GateReason.EMPTY_PHRASE
    )
    assert gate_rules(text="fixed", subject="当前插件").reason == GateReason.NO_SUBJECT


def test_it_stores_junk_as_rejected_with_its_reason_while_the_batch_passes(project_scope):
    for text in NORMAL:
        narrative_write(data=NarrativeInput(scope_id=project_scope.pk, gesture=text))
    for text, _ in JUNK:
        narrative_write(data=NarrativeInput(scope_id=project_scope.pk, gesture=text))

    assert Narrative.objects.filter(status=MemoryStatus.ACTIVE).count() == len(NORMAL)
    for text, reason in JUNK:
        row = Narrative.objects.get(gesture=text)
        assert row.status == MemoryStatus.REJECTED
        event = AuditEvent.objects.get(target_type="narrative", target_id=row.pk)
        assert event.action == "reject" and event.actor == "rule"
        assert str(reason) in event.reason
        assert event.after["gate"] == reason


def test_it_rejects_a_fact_about_an_unnamed_subject_and_keeps_it(project_scope):
    fact = fact_write(
        data=FactInput(
            scope_id=project_scope.pk,
            profile_name="当前插件",
            profile_kind="project",
            kind=FactKind.FACT,
            predicate="security_status",
            value="has_vulnerabilities",
        )
    )
    assert fact.status == MemoryStatus.REJECTED
    assert Fact.objects.filter(status=MemoryStatus.ACTIVE).count() == 0
    assert (
        AuditEvent.objects.get(target_type="fact", target_id=fact.pk).after["gate"]
        == GateReason.NO_SUBJECT
    )


def test_it_lets_the_llm_judge_when_it_answers_in_range(fake_llm, project_scope, settings):
    settings.TIDELINE_GATE_USE_LLM = True
    fake_llm.script(json_answer({"reason": "instruction"}))
    narrative = narrative_write(
        data=NarrativeInput(scope_id=project_scope.pk, gesture="archive-manager needs a release")
    )
    assert narrative.status == MemoryStatus.REJECTED
    event = AuditEvent.objects.get(target_type="narrative", target_id=narrative.pk)
    assert event.actor == "llm" and event.after["gate"] == "instruction"
    assert (
        "archive-manager needs a release" in fake_llm.requests[0]["body"]["messages"][1]["content"]
    )


@pytest.mark.parametrize(
    "answer",
    [
        text_answer("certainly! it passes"),
        json_answer({"reason": "looks-fine-to-me"}),
        json_answer({"verdict": 3}),
        status_answer(500),
        slow_answer(3.0, {"reason": "passed"}),
    ],
    ids=["bad-json", "out-of-range", "missing", "http-500", "timeout"],
)
def test_it_falls_back_to_the_rules_on_any_llm_failure(fake_llm, project_scope, settings, answer):
    settings.TIDELINE_GATE_USE_LLM = True
    settings.TIDELINE_LLM_TIMEOUT = 0.5
    fake_llm.script(answer)
    narrative = narrative_write(
        data=NarrativeInput(scope_id=project_scope.pk, gesture="你自己改完之后")
    )
    assert narrative.status == MemoryStatus.REJECTED
    event = AuditEvent.objects.get(target_type="narrative", target_id=narrative.pk)
    assert event.actor == "rule" and event.after["gate"] == GateReason.INSTRUCTION
    assert len(fake_llm.requests) == 1
    assert integrity_ok()


def test_it_never_sends_a_secret_memory_to_the_llm(fake_llm, project_scope, settings):
    settings.TIDELINE_GATE_USE_LLM = True
    narrative_write(
        data=NarrativeInput(
            scope_id=project_scope.pk, gesture="archive-manager deploy key is K-123", secret=True
        )
    )
    assert fake_llm.requests == []
