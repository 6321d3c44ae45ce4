from io import StringIO

import pytest
from django.core.management import call_command

from memory.models import (
    AuditEvent,
    Fact,
    InboxItem,
    InboxStatus,
    Memory,
    MemoryStatus,
    Narrative,
    ScopeKind,
)
from memory.services.facts import FactInput, fact_write
from memory.services.inbox import (
    USER_PROFILE,
    inbox_capture,
    inbox_extract_rules,
    inbox_flush,
)
from memory.services.scopes import scope_global, scope_resolve
from memory.services.timeline import session_start
from tests.fakes.llm_server import json_answer, slow_answer, status_answer, text_answer
from tests.lifecycle.conftest import integrity_ok, replay_statuses, stored_statuses


def flush(*args) -> str:
    out = StringIO()
    call_command("flush_inbox", *args, stdout=out)
    return out.getvalue()


def test_it_processes_each_item_exactly_once(db, make_repo):
    repo = make_repo("archive-manager", "git@github.com:someone/archive-manager.git")
    inbox_capture(content="我叫李雷。我是一名后端工程师。请用简体中文回复。", cwd=str(repo))
    inbox_capture(content="archive-manager 的索引放在 SQLite 里", cwd=str(repo))
    inbox_capture(content="记忆有什么优化空间？", cwd=str(repo))

    out = flush()
    assert "[1/3]" in out and "processed 2, skipped 1" in out
    assert InboxItem.objects.filter(status=InboxStatus.PENDING).count() == 0
    memories = Memory.objects.count()
    audits = AuditEvent.objects.count()

    again = flush()
    assert "processed 0, skipped 0" in again
    assert Memory.objects.count() == memories and AuditEvent.objects.count() == audits
    assert inbox_flush().total == 0


def test_it_puts_each_candidate_in_the_right_scope(db, make_repo):
    repo = make_repo("archive-manager", "git@github.com:someone/archive-manager.git")
    inbox_capture(
        content="我叫李雷。DSH 装在 /opt/dsh。archive-manager 的索引放在 SQLite 里。",
        cwd=str(repo),
    )
    inbox_flush()
    project = scope_resolve(cwd=str(repo))
    name = Fact.objects.get(predicate="name")
    assert name.scope == scope_global() and name.value == "李雷"
    assert name.status == MemoryStatus.ACTIVE
    machine = Narrative.objects.get(gesture__contains="DSH")
    assert machine.scope.kind == ScopeKind.WORKSPACE
    project_note = Narrative.objects.get(gesture__contains="SQLite")
    assert project_note.scope == project
    # Free text from rules waits as a candidate and depends on the checkout it was said in.
    assert project_note.status == MemoryStatus.CANDIDATE
    assert project_note.depends_on == [f"path:{repo.resolve()}"]


def test_it_rejects_junk_from_the_inbox_and_keeps_it(db, make_repo):
    repo = make_repo("archive-manager", "git@github.com:someone/archive-manager.git")
    for text in ("当前插件要小心", "也可以自检一遍…：综合结论：当前插件不建议…", "你自己改完之后"):
        inbox_capture(content=text, cwd=str(repo))
    inbox_flush()
    rejected = Narrative.objects.filter(status=MemoryStatus.REJECTED)
    assert rejected.count() == 3
    reasons = set(AuditEvent.objects.filter(action="reject").values_list("after__gate", flat=True))
    assert reasons == {"no-subject", "no-context", "instruction"}


def test_it_promotes_a_statement_repeated_in_a_later_utterance(db, make_repo):
    repo = make_repo("archive-manager", "git@github.com:someone/archive-manager.git")
    inbox_capture(content="archive-manager 的索引放在 SQLite 里", cwd=str(repo))
    inbox_flush()
    inbox_capture(content="archive-manager 的索引放在 SQLite 里。", cwd=str(repo))
    inbox_flush()
    note = Narrative.objects.get()
    assert note.status == MemoryStatus.ACTIVE
    assert AuditEvent.objects.filter(action="promote", target_id=note.pk).exists()


def _secret_name(value: str):
    return fact_write(
        data=FactInput(
            scope_id=scope_global().pk,
            profile_name=USER_PROFILE,
            profile_kind="user",
            kind="fact",
            predicate="name",
            value=value,
            secret=True,
        )
    )


def test_it_leaves_a_secret_value_secret_when_a_capture_restates_it(db, make_repo):
    """A flush answers the owner only: a captured value equal to the secret current one is a
    restatement, not a plain replacement that would show the value to every agent."""
    repo = make_repo("archive-manager", "git@github.com:someone/archive-manager.git")
    secret = _secret_name("李雷")
    inbox_capture(content="我叫李雷。", cwd=str(repo))
    inbox_flush()
    current = Fact.objects.get(predicate="name", status=MemoryStatus.ACTIVE)
    assert current.pk == secret.pk and current.secret


def test_it_keeps_a_secret_keys_new_value_secret_when_a_capture_changes_it(db, make_repo):
    """The inbox speaks for no agent: a new value it learns for a key the owner made secret
    stays secret, instead of replacing the secret with a value every agent reads."""
    repo = make_repo("archive-manager", "git@github.com:someone/archive-manager.git")
    secret = _secret_name("李雷")
    inbox_capture(content="我叫韩梅梅。", cwd=str(repo))
    inbox_flush()
    current = Fact.objects.get(predicate="name", status=MemoryStatus.ACTIVE)
    assert current.pk != secret.pk and current.value == "韩梅梅" and current.secret


def test_it_does_not_capture_subagents_unless_configured(db, settings, project_scope):
    parent = session_start(runtime="test", external_id="main", scope_id=project_scope.pk)
    child = session_start(
        runtime="test",
        external_id="child",
        scope_id=project_scope.pk,
        parent_id=parent.pk,
        delegation_depth=1,
    )
    assert inbox_capture(content="Delegated: refactor the parser", session_id=child.pk) is None
    assert inbox_capture(content="Delegated prompt", delegation_depth=2) is None
    assert InboxItem.objects.count() == 0
    settings.TIDELINE_CAPTURE_SUBAGENTS = True
    item = inbox_capture(content="Delegated: refactor the parser", session_id=child.pk)
    assert item.origin == "subagent" and item.delegation_depth == 1
    assert inbox_capture(content="The user reviews every parser change", session_id=parent.pk)


@pytest.mark.parametrize(
    "bad",
    [
        {"content": ""},
        {"content": "x", "origin": "robot"},
        {"content": "archive-manager keeps its index in SQLite", "cwd": "relative/checkout"},
    ],
)
def test_it_refuses_bad_captures(db, bad):
    from memory.services.errors import InvalidInput

    with pytest.raises(InvalidInput):
        inbox_capture(**bad)
    assert InboxItem.objects.count() == 0


def test_it_never_files_what_was_said_in_a_directory_this_machine_lacks_in_global(db, tmp_path):
    elsewhere = str(tmp_path / "container" / "archive-manager")
    item = inbox_capture(content="archive-manager keeps its index in SQLite", cwd=elsewhere)
    assert item.scope.kind == ScopeKind.PROJECT and item.scope.key == elsewhere
    # An imported item without a scope is filed the same way when it is flushed.
    InboxItem.objects.filter(pk=item.pk).update(scope=None)
    inbox_flush()
    note = Narrative.objects.get(gesture__contains="SQLite")
    assert note.scope == item.scope


def test_it_skips_an_imported_item_said_in_a_place_no_write_may_name(db):
    item = inbox_capture(content="archive-manager keeps its index in SQLite")
    assert item.scope == scope_global()
    InboxItem.objects.filter(pk=item.pk).update(scope=None, cwd="relative/checkout")
    report = inbox_flush()
    assert report.skipped == 1 and "cwd must be an absolute path" in report.errors[0]
    assert Narrative.objects.count() == 0


def test_it_extracts_profiles_in_four_languages():
    facts = {
        (c.predicate, c.value)
        for text in (
            "My name is Ada Lovelace. I am a software engineer. Reply in English.",
            "Me llamo Lucía. Soy ingeniera de datos.",
            "私の名前は田中です。日本語で返事してください。",
            "我叫李雷。我平时用 neovim 写代码。",
        )
        for c in inbox_extract_rules(text)
        if c.is_fact
    }
    assert facts == {
        ("name", "Ada Lovelace"),
        ("occupation", "software engineer"),
        ("responds_in", "English"),
        ("name", "Lucía"),
        ("occupation", "ingeniera de datos"),
        ("name", "田中"),
        ("responds_in", "日本語"),
        ("name", "李雷"),
        ("editor", "neovim"),
    }
    assert inbox_extract_rules("How do I run the tests?") == []


def test_it_uses_the_llm_extraction_when_it_answers_well(db, fake_llm, make_repo):
    repo = make_repo("archive-manager", "git@github.com:someone/archive-manager.git")
    fake_llm.script(
        json_answer(
            {
                "memories": [
                    {
                        "type": "fact",
                        "scope": "project",
                        "profile": "archive-manager",
                        "kind": "fact",
                        "predicate": "security_status",
                        "value": "fixed",
                        "summary": "[项目·archive-manager] 路径穿越漏洞已修复",
                        "confidence": 0.9,
                        "importance": 4,
                    },
                    {
                        "type": "narrative",
                        "scope": "global",
                        "gesture": "The user fixed archive-manager's path traversal bug",
                        "importance": 3,
                        "confidence": 0.8,
                        "tags": ["security"],
                    },
                    {
                        "type": "narrative",
                        "scope": "global",
                        "gesture": "The user prefers short commit messages in English",
                        "importance": 3,
                        "confidence": 0.8,
                        "tags": ["style"],
                    },
                ]
            }
        )
    )
    inbox_capture(content="路径穿越那个修好了", cwd=str(repo))
    out = flush("--llm")
    assert "LLM fell back" not in out
    fact = Fact.objects.get(predicate="security_status")
    assert fact.status == MemoryStatus.ACTIVE and fact.scope.kind == ScopeKind.PROJECT
    assert AuditEvent.objects.get(target_type="fact", target_id=fact.pk).actor == "llm"
    # The LLM suggests global for both; only the user's preference goes there, as by rule. The
    # project's work stays in the project, where other projects' keys cannot read it.
    fixed = Narrative.objects.get(gesture__contains="path traversal")
    assert fixed.scope.kind == ScopeKind.PROJECT and fixed.scope == fact.scope
    assert Narrative.objects.get(gesture__contains="commit messages").scope == scope_global()
    assert InboxItem.objects.get().result["extractor"] == "llm"


@pytest.mark.parametrize(
    "answer",
    [
        text_answer("{not json"),
        json_answer({"memories": [{"type": "fact", "scope": "project", "predicate": "Bad Key"}]}),
        json_answer({"memories": [{"type": "narrative", "scope": "someone-else", "gesture": "x"}]}),
        json_answer({"memories": "everything"}),
        status_answer(500),
        slow_answer(3.0, {"memories": []}),
    ],
    ids=["bad-json", "bad-predicate", "out-of-range-scope", "not-a-list", "http-500", "timeout"],
)
def test_it_falls_back_to_the_rules_when_the_llm_fails(db, fake_llm, make_repo, settings, answer):
    settings.TIDELINE_LLM_TIMEOUT = 0.5
    repo = make_repo("archive-manager", "git@github.com:someone/archive-manager.git")
    fake_llm.script(answer)
    inbox_capture(content="我叫李雷。你自己改完之后", cwd=str(repo))
    out = flush("--llm")
    assert "LLM fell back to rules 1 time(s)" in out
    assert Fact.objects.get(predicate="name").value == "李雷"
    assert Narrative.objects.get().status == MemoryStatus.REJECTED
    assert InboxItem.objects.get().result["extractor"] == "rule"
    assert integrity_ok()
    assert replay_statuses() == stored_statuses()
