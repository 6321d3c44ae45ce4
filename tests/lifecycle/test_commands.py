import io
import json
import stat
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from memory.models import AttentionEvent, AuditEvent, FactKind, Memory
from memory.services.facts import FactInput, fact_write
from memory.services.inbox import inbox_capture
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_global, scope_resolve
from tests.fakes.llm_server import json_answer, status_answer


def run(*args, stdin: str | None = None, monkeypatch=None) -> str:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_it_lists_each_scope_on_its_own(db, make_repo, settings):
    settings.TIDELINE_WORKSPACE = "laptop"
    repo = make_repo("archive-manager", "git@github.com:someone/archive-manager.git")
    other = make_repo("billing", "git@github.com:someone/billing.git")
    project = scope_resolve(cwd=str(repo))
    scope_resolve(cwd=str(other))
    workspace = scope_resolve(explicit="workspace")
    narrative_write(data=NarrativeInput(scope_id=project.pk, gesture="archive-manager uses zstd"))
    narrative_write(data=NarrativeInput(scope_id=workspace.pk, gesture="DSH lives in /opt/dsh"))
    fact_write(
        data=FactInput(
            scope_id=scope_global().pk,
            profile_name="用户",
            kind=FactKind.PREFERENCE,
            predicate="responds_in",
            value="简体中文",
            summary="[偏好] 用户希望回复用简体中文",
        )
    )
    narrative_write(data=NarrativeInput(scope_id=project.pk, gesture="当前插件要小心"))

    out = run("by_scope", "project", "--cwd", str(repo))
    assert out.startswith("[项目·archive-manager] 1 active memories")
    assert "zstd" in out and "DSH" not in out and "简体中文" not in out
    assert "rejected" in run("by_scope", "project", "--cwd", str(repo), "--status", "all")
    assert "要小心" in run("by_scope", "project", "--cwd", str(repo), "--status", "rejected")
    assert "0 active memories" in run("by_scope", "project", "--cwd", str(other))
    assert "DSH" in run("by_scope", "workspace") and "工作区·laptop" in run("by_scope", "workspace")
    out = run("by_scope", "global")
    assert "[偏好] 用户希望回复用简体中文" in out and "zstd" not in out
    with pytest.raises(CommandError, match="not inside a known project"):
        run("by_scope", "project", "--cwd", "/")


def test_it_prints_stats(db, project_scope):
    narrative_write(
        data=NarrativeInput(scope_id=project_scope.pk, gesture="archive-manager uses zstd")
    )
    narrative_write(data=NarrativeInput(scope_id=project_scope.pk, gesture="你自己改完之后"))
    inbox_capture(content="archive-manager 的索引放在 SQLite 里", scope_id=project_scope.pk)
    out = run("stats")
    assert "memories by status: active 1, rejected 1" in out
    assert "inbox: pending 1" in out
    assert "LLM: not configured (rules only)" in out
    assert "audit events: " in out


def test_it_saves_the_llm_key_from_stdin_without_echoing_it(db, settings, tmp_path, monkeypatch):
    settings.TIDELINE_LLM_CONFIG_FILE = tmp_path / "llm.json"
    out = run(
        "llm",
        "set",
        "--base-url",
        "https://api.example.com/v1",
        "--model",
        "deepseek-chat",
        "--api-key-stdin",
        stdin="sk-very-secret\n",
        monkeypatch=monkeypatch,
    )
    assert "sk-very-secret" not in out and "stored, 0600" in out
    path = tmp_path / "llm.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["api_key"] == "sk-very-secret"
    assert "sk-very-secret" not in run("stats")
    # Where memory text will be sent is a decision on record; the key is not in it.
    change = AuditEvent.objects.get(target_type="llm_config")
    assert change.actor == "owner" and change.request_id
    assert change.after["base_url"] == "https://api.example.com/v1" and change.before is None
    assert "sk-very-secret" not in json.dumps([change.before, change.after, change.reason])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--base-url", "http://api.example.com/v1", "--model", "m"], "must use HTTPS"),
        (["--base-url", "ftp://x", "--model", "m"], "http"),
    ],
)
def test_it_refuses_insecure_llm_endpoints(db, monkeypatch, args, message):
    with pytest.raises(CommandError, match=message):
        run("llm", "set", *args, "--api-key-stdin", stdin="sk-x\n", monkeypatch=monkeypatch)


def test_it_refuses_to_prompt_without_a_terminal(db, monkeypatch):
    with pytest.raises(CommandError, match="--api-key-stdin"):
        run(
            "llm",
            "set",
            "--base-url",
            "http://127.0.0.1:11434/v1",
            "--model",
            "qwen2.5:7b",
            stdin="",
            monkeypatch=monkeypatch,
        )


def test_it_fails_llm_test_without_an_llm(db):
    with pytest.raises(CommandError, match="no LLM is configured"):
        call_command("llm", "test")


def test_it_tests_a_configured_llm(db, fake_llm):
    fake_llm.script(json_answer({"ok": True}), status_answer(500))
    assert "LLM ok: fake-model" in run("llm", "test")
    with pytest.raises(CommandError, match="did not answer"):
        call_command("llm", "test")
    assert "sk-test-secret" not in json.dumps(fake_llm.requests[0]["body"])


def test_it_configures_a_local_keyless_llm(db, settings, tmp_path):
    settings.TIDELINE_LLM_CONFIG_FILE = tmp_path / "llm.json"
    out = run(
        "llm", "set", "--base-url", "http://127.0.0.1:11434/v1", "--model", "qwen", "--no-api-key"
    )
    assert "key none" in out
    assert "LLM: qwen at http://127.0.0.1:11434/v1 (key not set)" in run("stats")


def test_it_recalls_as_the_agent_would_without_secrets_or_counting_an_activation(db, make_repo):
    """`context` is the owner looking at what an agent gets: it listed secret memories, which no
    agent's injection shows, and counted each hit as an activation, which moves decay."""
    repo = make_repo("archive-manager")
    project = scope_resolve(cwd=str(repo))
    shown = narrative_write(
        data=NarrativeInput(scope_id=project.pk, gesture="the archive runs on zstd level 19")
    )
    narrative_write(
        data=NarrativeInput(
            scope_id=project.pk, gesture="the archive zstd dictionary key is hunter2", secret=True
        )
    )

    out = run("context", "--query", "archive zstd", "--cwd", str(repo))

    assert f"#{shown.pk} " in out and "hunter2" not in out
    assert Memory.objects.filter(activation_count__gt=0).count() == 0
    assert not AttentionEvent.objects.exists()


def test_it_reads_a_relative_cwd_from_the_directory_it_runs_in(db, make_repo, monkeypatch):
    """Before, `context --cwd archive` (relative) was read as global, with no word about it, and
    `by_scope project --cwd archive` said it was inside no known project."""
    repo = make_repo("archive-manager")
    project = scope_resolve(cwd=str(repo))
    shown = narrative_write(
        data=NarrativeInput(scope_id=project.pk, gesture="the archive runs on zstd level 19")
    )
    monkeypatch.chdir(repo.parent)

    out = run("context", "--query", "archive zstd", "--cwd", repo.name)
    listed = run("by_scope", "project", "--cwd", repo.name)

    assert f"#{shown.pk} " in out
    assert "zstd level 19" in listed


def test_it_rejects_a_bad_as_of(db):
    with pytest.raises(CommandError, match="ISO"):
        call_command("context", "--query", "x", "--cwd", "/", "--as-of", "yesterday")


def test_it_prompts_for_the_key_without_echo_on_a_terminal(db, settings, tmp_path, monkeypatch):
    settings.TIDELINE_LLM_CONFIG_FILE = tmp_path / "llm.json"
    prompts = []

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("getpass.getpass", lambda prompt: prompts.append(prompt) or "sk-typed")
    out = run("llm", "set", "--base-url", "https://api.example.com/v1", "--model", "m")
    assert prompts == ["API key (not echoed): "]
    assert "sk-typed" not in out
    assert json.loads((tmp_path / "llm.json").read_text())["api_key"] == "sk-typed"
