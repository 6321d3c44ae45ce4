"""A lived-in store for the owner-panel tests and screenshots: profiles in Chinese and English,
a self-concept, project narratives with long summaries, threads, attention over soft clusters with
long CJK names, an agent's deletion and a DREAM run with a failed layer."""

from datetime import timedelta

from django.utils import timezone

from dream.models import DreamRun, EmbeddingCluster, EmbeddingClusterMember
from injection.services.access import apikey_create
from memory.models import Actor, AttentionEvent, FactKind, ScopeKind
from memory.services.audit import audit_context
from memory.services.facts import FactInput, fact_write
from memory.services.lifecycle import memory_expire
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_ensure, scope_global
from memory.services.self_concept import self_concept_write
from memory.services.threads import thread_write

PREFERENCE = "[偏好] 用户希望回复用简体中文"
SELF_FACT = "I am the archive-manager agent: I keep the owner's archives healthy"
THREAD = "为什么衰减会误伤用户的全局偏好？值得再看一次 decay 的阈值"
AGENT_DELETED = "the nightly backup runs at 02:00 from the old cron box"
CLUSTER_NAMES = [
    "边界检查 · 解析器 · 调用方 · 输入校验 · 错误处理 · 兜底策略",
    "archive compression, zstd levels and the restore path",
    "编辑器偏好与快捷键配置（helix / neovim）以及终端主题",
    "billing webhooks",
]
NARRATIVES = [
    "moved the search index to trigram so that substrings of identifiers like whale-listen match",
    "边界检查放在解析器里，不放在调用方；调用方只处理解析器返回的错误",
    "the owner asked for smaller commits and a summary of every change before pushing",
    "decided to keep raw turns forever and only budget what goes into the context window",
    "zstd level 19 made the nightly archive 30% smaller but doubled the restore time",
    "restore drill on the staging box took 14 minutes end to end",
]


def owner_panel_seed() -> dict:
    now = timezone.now()
    world = scope_global()
    project = scope_ensure(kind=ScopeKind.PROJECT, key="/work/projects/archive-manager")
    facts = [
        ("用户", "user", FactKind.PREFERENCE, "responds_in", "简体中文", PREFERENCE),
        (
            "用户",
            "user",
            FactKind.PREFERENCE,
            "editor",
            "helix",
            "[偏好] 用户写代码用 helix 编辑器",
        ),
        ("用户", "user", FactKind.FACT, "timezone", "Asia/Shanghai", "用户在上海时区（UTC+8）"),
        ("用户", "user", FactKind.PREFERENCE, "commit_style", "small commits", ""),
        (
            "Mara",
            "person",
            FactKind.RELATIONSHIP,
            "role",
            "reviews billing",
            "Mara reviews billing",
        ),
    ]
    for name, kind, fact_kind, predicate, value, summary in facts:
        fact_write(
            data=FactInput(
                scope_id=world.pk,
                profile_name=name,
                profile_kind=kind,
                kind=fact_kind,
                predicate=predicate,
                value=value,
                summary=summary,
            )
        )
    fact_write(
        data=FactInput(
            scope_id=project.pk,
            profile_name="archive-manager",
            profile_kind="project",
            kind=FactKind.FACT,
            predicate="security_status",
            value="has_vulnerabilities",
        )
    )
    self_concept_write(field="fact", content=SELF_FACT)
    self_concept_write(
        field="terrain", content="长期项目：archive-manager；常用工具：git、zstd、PostgreSQL"
    )
    self_concept_write(
        field="self_reflection", content="I tend to over-explain; the owner prefers short answers"
    )
    narratives = [
        narrative_write(data=NarrativeInput(gesture=text, scope_id=project.pk, tags=["archive"]))
        for text in NARRATIVES
    ]
    doomed = narrative_write(data=NarrativeInput(gesture=AGENT_DELETED, scope_id=project.pk))
    key, _ = apikey_create(name="laptop", scope_ids=[project.pk])
    with audit_context(actor=Actor.AGENT, key_id=key.pk):
        memory_expire(memory_id=doomed.pk, actor=Actor.AGENT, reason="agent: obsolete, box retired")
    thread_write(scope_id=project.pk, content=THREAD, importance=5, unresolved=5)
    thread_write(scope_id=project.pk, content="Is level 19 worth the restore time?")
    for position, name in enumerate(CLUSTER_NAMES):
        cluster = EmbeddingCluster.objects.create(
            scope=project,
            index=position,
            name=name,
            size=3,
            centroid=b"",
            embedding_model="test",
        )
        for rank, narrative in enumerate(narratives[position : position + 1], 1):
            EmbeddingClusterMember.objects.create(
                cluster=cluster, memory=narrative, rank=rank, distance=0.1
            )
    for days_ago in range(0, 12, 2):
        for narrative in narratives[:3]:
            AttentionEvent.objects.create(
                memory=narrative, source="t1_prefetch", occurred_at=now - timedelta(days=days_ago)
            )
    run = DreamRun.objects.create(
        layer="all",
        day=timezone.localdate(),
        status="partial",
        trigger="beat",
        started_at=now - timedelta(minutes=3),
        finished_at=now,
        tokens=4210,
        error="solidify: the LLM answered invalid JSON",
        stats={
            "order": ["scan", "script", "solidify", "combing", "drift", "dream"],
            "layers": {
                "scan": {"status": "ok", "track_a": 2, "track_b": 1, "track_b_turns": 14},
                "script": {"status": "ok", "topics": 5, "soft_clusters": 4, "entities": 3},
                "solidify": {
                    "status": "failed",
                    "reason": "the LLM answered invalid JSON",
                    "tokens": 1200,
                },
                "combing": {
                    "status": "ok",
                    "tokens": 3010,
                    "written": {"fact": [narratives[0].pk], "thread": []},
                    "rejected": ["fact 'mood' refused by the gate: value is an instruction"],
                    "material": 12,
                },
                "drift": {"status": "skipped", "reason": "already done today in run #1"},
                "dream": {"status": "skipped", "reason": "already done today in run #1"},
            },
        },
    )
    return {"project": project, "doomed": doomed, "run": run, "narratives": narratives}
