"""Seed 003's "实测数据" table, replayed end to end through the inbox, the write path, the
commands and retrieval:

| 场景 | 改造前 | 改造后 |
| 「记忆有什么优化空间」召回 | 0 条 | 3 条 |
| 跨项目泄漏 | 项目 A 记忆进入项目 B 会话 | 完全隔离，无关目录只放行全局 |
| 垃圾记忆进库 | 直接写入 | 闸门拦下，标 rejected |
| 状态更新 | 新旧两条并存 | 旧的 superseded，新的 active |
| 项目删除后 | 记忆永远存活 | 自动 expired_by=scope-gone |
"""

import re
import shutil
from io import StringIO

from django.core.management import call_command

from memory.models import AuditEvent, Fact, Memory, MemoryStatus, Narrative
from memory.services.facts import FactInput, fact_write
from memory.services.inbox import inbox_capture
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_global, scope_resolve
from tests.lifecycle.conftest import replay_statuses, stored_statuses

LONG_MEMORIES = [
    "Tideline 的记忆检索在长文本上召回率偏低，优化空间在于把查询切成词项后按覆盖率打分，"
    "而不是用整句 Jaccard，后者会被长记忆稀释到接近零；同时要保留中文二字词的匹配。",
    "记忆注入的优化空间：会话开场的 T0 到 T3 合计约九千到一万一千 token，"
    "可以按层设预算，T2 预取池只保留权重最高的三条，并且对标签去重，避免同一话题重复出现。",
    "关于记忆库维护的优化空间：过期规则应该按重要性分档衰减，依赖路径消失的记忆要自动失效，"
    "这样删掉的项目不会在上下文里继续出现，整理任务可以每天夜里跑一次。",
]
FILLER = [
    "archive-manager 的发布流程先走 staging 再走 production",
    "用户周末喜欢去海边骑车",
    "billing-service 的发票编号按月重置",
    "DSH 的数据目录在用户主目录下的 .dsh 文件夹",
]


def command(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def ids_in(output: str) -> set[int]:
    return {int(pk) for pk in re.findall(r"^- #(\d+) ", output, flags=re.MULTILINE)}


def test_it_replays_the_measured_table_of_seed_003(db, make_repo, tmp_path):
    project_a = make_repo("archive-manager", "git@github.com:someone/archive-manager.git")
    project_b = make_repo("billing-service", "git@github.com:someone/billing-service.git")
    unrelated = tmp_path / "downloads"
    unrelated.mkdir()
    scope_a = scope_resolve(cwd=str(project_a))
    scope_b = scope_resolve(cwd=str(project_b))

    # 「记忆有什么优化空间」: three long memories are recalled, not diluted to nothing.
    recalled = [
        narrative_write(data=NarrativeInput(scope_id=scope_global().pk, gesture=text)).pk
        for text in LONG_MEMORIES
    ]
    for text in FILLER:
        narrative_write(data=NarrativeInput(scope_id=scope_global().pk, gesture=text))
    out = command(
        "context", "--query", "记忆有什么优化空间", "--cwd", str(unrelated), "--limit", "3"
    )
    assert ids_in(out) == set(recalled)

    # Cross-project leak: A's password never reaches B; an unrelated directory sees global only.
    inbox_capture(content="archive-manager 的部署密码是 hunter2-kestrel", cwd=str(project_a))
    inbox_capture(content="archive-manager 的部署密码是 hunter2-kestrel", cwd=str(project_a))
    # Junk never gets in: each of seed 003's three examples is stopped, the normal batch passes.
    junk = ["当前插件要小心", "也可以自检一遍…：综合结论：当前插件不建议…", "你自己改完之后"]
    for text in junk:
        inbox_capture(content=text, cwd=str(project_a))
    inbox_capture(
        content="我叫李雷。我是一名后端工程师。请用简体中文回复。archive-manager 用 zstd 压缩归档。",
        cwd=str(project_a),
    )
    inbox_capture(content="billing-service 的发票用 PostgreSQL 存", cwd=str(project_b))
    flushed = command("flush_inbox")
    assert "processed 7, skipped 0" in flushed

    password = Narrative.objects.get(gesture__contains="hunter2-kestrel")
    assert password.scope == scope_a and password.status == MemoryStatus.ACTIVE  # said twice
    assert "hunter2-kestrel" in command("context", "--query", "部署密码", "--cwd", str(project_a))
    for cwd in (project_b, unrelated):
        out = command(
            "context", "--query", "archive-manager 部署密码 hunter2-kestrel", "--cwd", str(cwd)
        )
        assert "hunter2-kestrel" not in out
    assert command("context", "--query", "x", "--cwd", str(unrelated)).startswith("scope: [全局]")

    rejected = Memory.objects.filter(status=MemoryStatus.REJECTED)
    assert sorted(m.summary for m in rejected) == sorted(junk)
    assert Memory.objects.filter(status=MemoryStatus.REJECTED).count() == 3
    assert set(
        AuditEvent.objects.filter(action="reject").values_list("after__gate", flat=True)
    ) == {"no-subject", "no-context", "instruction"}
    profile = {f.predicate: f.value for f in Fact.objects.filter(scope=scope_global())}
    assert profile == {"name": "李雷", "occupation": "后端工程师", "responds_in": "简体中文"}
    assert Narrative.objects.filter(gesture__contains="zstd", scope=scope_a).exists()
    assert Narrative.objects.filter(gesture__contains="PostgreSQL", scope=scope_b).exists()

    # Status update: the fixed status replaces the vulnerable one under its stable key.
    for value in ("has_vulnerabilities", "fixed"):
        fact_write(
            data=FactInput(
                scope_id=scope_a.pk,
                profile_name="archive-manager",
                profile_kind="project",
                kind="fact",
                predicate="security_status",
                value=value,
                depends_on=[f"path:{project_a}"],
            )
        )
    statuses = dict(Fact.objects.filter(predicate="security_status").values_list("value", "status"))
    assert statuses == {"has_vulnerabilities": "superseded", "fixed": "active"}
    out = command("context", "--query", "security status", "--cwd", str(project_a))
    assert "fixed" in out and "has_vulnerabilities" not in out

    # Project deleted: everything that depended on its checkout expires as scope-gone.
    shutil.rmtree(project_a)
    assert "scope-gone" in command("maintain", "--dry-run")
    command("maintain")
    live_a = Memory.objects.filter(scope=scope_a, status__in=["active", "candidate"])
    assert not live_a.exists()
    assert set(
        Memory.objects.filter(scope=scope_a, status=MemoryStatus.EXPIRED).values_list(
            "expired_by", flat=True
        )
    ) == {"scope-gone"}
    out = command("context", "--query", "archive-manager", "--cwd", str(project_b))
    assert "archive-manager 用 zstd" not in out and "hunter2" not in out
    assert "billing-service" in command("by_scope", "project", "--cwd", str(project_b))

    assert replay_statuses() == stored_statuses()
