"""Script-layer time at 1k, 10k and 50k generated narratives (target: ≤ 60 s at 10k).

The first pass is cold (every text segmented by jieba, every cluster written); `rerun` is the same
layer again over unchanged memories, which is what the 6-hourly rebuild and the nightly DREAM pay
once the keyword cache is warm.

Each size runs in its own throwaway SQLite database (the owner's data is never touched), filled
directly with generated rows rather than through the write path, which would cost minutes per size
and is not what is measured. Texts mix Chinese and English words drawn with a Zipf-like skew, so
the document-frequency filter has generic, topical and rare terms to sort; tags and entities_role
are set on a share of the rows. Embeddings are NOT computed by the embedder (50k encodings would
take most of an hour on this machine): they are random unit vectors scattered around 64 random
centres, which gives k-means the same amount of work as real vectors of the same dimension.
"""

import tempfile
import time
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.utils import timezone

DIMENSION = 512
CENTRES = 64
CHINESE = [
    "边界",
    "拒绝",
    "逃避",
    "失控",
    "审查",
    "判断",
    "执行",
    "迁移",
    "索引",
    "备份",
    "归档",
    "压缩",
    "部署",
    "测试",
    "日志",
    "缓存",
    "权限",
    "路径",
    "会话",
    "记忆",
    "梦境",
    "潮汐",
    "海岸",
    "散步",
    "音乐",
    "钢琴",
    "预算",
    "账单",
    "合同",
    "会议",
    "计划",
    "延期",
    "修复",
    "漏洞",
    "性能",
    "延迟",
    "并发",
    "锁定",
    "数据库",
    "服务器",
    "客户端",
    "接口",
    "文档",
    "翻译",
    "学习",
    "阅读",
    "写作",
    "设计",
    "重构",
    "评审",
    "发布",
    "回滚",
    "监控",
    "告警",
    "用户",
    "偏好",
    "习惯",
    "早餐",
    "咖啡",
    "绿茶",
    "红茶",
    "旅行",
    "天气",
    "雨天",
    "晴天",
    "朋友",
    "家人",
    "工作",
    "休息",
    "焦虑",
    "平静",
    "好奇",
    "犹豫",
    "坚持",
    "放弃",
    "成功",
    "失败",
    "重要",
    "困难",
    "简单",
    "复杂",
    "安静",
    "热闹",
    "温暖",
    "寒冷",
]
ENGLISH = [
    "archive",
    "manager",
    "index",
    "backup",
    "restore",
    "migration",
    "schema",
    "query",
    "latency",
    "throughput",
    "cache",
    "scheduler",
    "worker",
    "broker",
    "queue",
    "retry",
    "timeout",
    "deadline",
    "review",
    "release",
    "rollback",
    "monitor",
    "alert",
    "garden",
    "piano",
    "nocturne",
    "walk",
    "tide",
    "shore",
    "harbor",
    "whale",
    "lantern",
    "budget",
    "invoice",
    "contract",
    "meeting",
    "travel",
    "weather",
    "coffee",
    "tea",
    "breakfast",
    "reading",
    "writing",
    "design",
    "refactor",
    "debug",
    "profile",
    "trace",
    "kernel",
    "compiler",
    "parser",
    "token",
    "embedding",
    "cluster",
    "centroid",
    "vector",
    "graph",
    "entity",
]
NAMES = ["照照", "甜心", "Alice", "Bob", "Carol", "Dmitri", "Eve", "Farah", "Gus", "Hana"]
ROLES = ["判断", "执行", "审查", "设计", "测试"]


def add_arguments(parser) -> None:
    parser.add_argument(
        "--sizes",
        default="1000,10000,50000",
        help="comma-separated numbers of narratives (default 1000,10000,50000)",
    )
    parser.add_argument("--seed", type=int, default=7)


def _sizes(raw: str) -> list[int]:
    try:
        sizes = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError as exc:
        raise CommandError(f"--sizes {raw!r} must be comma-separated integers") from exc
    if not sizes or any(size < 1 or size > 200_000 for size in sizes):
        raise CommandError("--sizes must be between 1 and 200000")
    return sizes


def _words(rng: np.random.Generator, vocabulary: list[str], count: int) -> list[str]:
    ranks = np.arange(1, len(vocabulary) + 1)
    weights = 1 / ranks**0.9
    return list(rng.choice(vocabulary, size=count, p=weights / weights.sum()))


def _generate(count: int, rng: np.random.Generator) -> None:
    from memory.models import EmbeddingStatus, Memory, MemoryType, Narrative, NarrativeTag
    from memory.services.scopes import scope_global

    scope = scope_global()
    centres = rng.normal(size=(CENTRES, DIMENSION)).astype(np.float32)
    now = timezone.now()
    tag_pool = [f"topic-{n}" for n in range(300)]
    batch = 2000
    child_fields = [
        field for field in Narrative._meta.local_concrete_fields if field.column != "memory_ptr_id"
    ]
    columns = ["memory_ptr_id", *[field.column for field in child_fields]]
    insert = (
        f"INSERT INTO {Narrative._meta.db_table} ({', '.join(columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))})"
    )
    for start in range(0, count, batch):
        size = min(batch, count - start)
        vectors = centres[rng.integers(0, CENTRES, size)] + rng.normal(
            scale=0.8, size=(size, DIMENSION)
        ).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        rows = []
        for offset in range(size):
            text = " ".join(
                _words(rng, CHINESE, int(rng.integers(4, 9)))
                + _words(rng, ENGLISH, int(rng.integers(2, 6)))
            )
            tags = list(dict.fromkeys(_words(rng, tag_pool, int(rng.integers(0, 3)))))
            entities = ""
            if rng.random() < 0.3:
                pair = rng.choice(NAMES, size=2, replace=False)
                roles = rng.choice(ROLES, size=3, replace=False)
                entities = f"{pair[0]}={roles[0]}+{roles[1]}; {pair[1]}={roles[2]}"
            rows.append((text, tags, entities, vectors[offset]))
        with transaction.atomic():
            parents = Memory.objects.bulk_create(
                [
                    Memory(
                        memory_type=MemoryType.NARRATIVE,
                        scope=scope,
                        summary=text[:500],
                        search_text=text + "\n" + " ".join(tags),
                        embedding=vector.tobytes(),
                        embedding_model="bench-random-unit",
                        embedding_status=EmbeddingStatus.READY,
                        recorded_at=now,
                        valid_from=now,
                        importance=int(rng.integers(1, 6)),
                    )
                    for text, tags, _, vector in rows
                ]
            )
            values = []
            for parent, (text, tags, entities, _) in zip(parents, rows, strict=True):
                child = Narrative(
                    gesture=text[:500],
                    tags=tags,
                    entities_role=entities,
                    emotional=int(rng.integers(1, 6)),
                    unresolved=int(rng.integers(1, 6)),
                    recurrence=int(rng.integers(1, 6)),
                    weight=float(rng.random()),
                )
                values.append(
                    [parent.pk]
                    + [
                        field.get_db_prep_save(getattr(child, field.attname), connection)
                        for field in child_fields
                    ]
                )
            with connection.cursor() as cursor:
                cursor.executemany(insert, values)
            NarrativeTag.objects.bulk_create(
                [
                    NarrativeTag(narrative_id=parent.pk, tag=tag)
                    for parent, (_, tags, _, _) in zip(parents, rows, strict=True)
                    for tag in tags
                ]
            )


def _timed(step) -> tuple[float, dict]:
    started = time.perf_counter()
    result = step()
    return time.perf_counter() - started, result


def run(command, options) -> None:
    from dream.script_layer import (
        attention_stats,
        entity_graph_rebuild,
        recurrence_refresh,
        script_layer_run,
        soft_clusters_rebuild,
        topic_clusters_rebuild,
    )

    if connection.vendor != "sqlite":
        raise CommandError("bench dream builds throwaway SQLite databases; use the SQLite default")
    sizes = _sizes(options["sizes"])
    rng = np.random.default_rng(options["seed"])
    original = connection.settings_dict["NAME"]
    workdir = Path(tempfile.mkdtemp(prefix="bench-dream-", dir=settings.DATA_DIR))
    out = command.stdout
    out.write("DREAM script layer: seconds per step (generated narratives, random unit vectors)")
    out.write(
        f"{'narratives':>10} {'recurrence':>10} {'topics':>8} {'soft k-means':>12} "
        f"{'entities':>8} {'attention':>9} {'total':>8} {'rerun':>7}   clusters (topic / soft)"
    )
    try:
        for size in sizes:
            connection.close()
            connection.settings_dict["NAME"] = str(workdir / f"bench-{size}.sqlite3")
            out.write(f"  … {size}: migrating and generating", ending="\r")
            out.flush()
            call_command("migrate", verbosity=0, interactive=False)
            _generate(size, rng)
            out.write(f"  … {size}: running the script layer   ", ending="\r")
            out.flush()
            steps = [
                ("recurrence", recurrence_refresh),
                ("topics", topic_clusters_rebuild),
                ("soft", soft_clusters_rebuild),
                ("entities", entity_graph_rebuild),
                ("attention", attention_stats),
            ]
            timings, results = {}, {}
            for name, step in steps:
                timings[name], results[name] = _timed(step)
            total = sum(timings.values())
            # The same layer again over unchanged memories: what every later rebuild costs.
            rerun, _ = _timed(script_layer_run)
            out.write(
                f"{size:>10} {timings['recurrence']:>10.2f} {timings['topics']:>8.2f} "
                f"{timings['soft']:>12.2f} {timings['entities']:>8.2f} "
                f"{timings['attention']:>9.2f} {total:>8.2f} {rerun:>7.2f}   "
                f"{results['topics']['clusters']} / {results['soft']['clusters']}"
            )
            if size == 10_000:
                verdict = "within" if total <= 60 else "OVER"
                out.write(f"{'':>10} 10k target ≤ 60 s: {verdict}")
    finally:
        connection.close()
        connection.settings_dict["NAME"] = original
        for path in workdir.glob("*"):
            path.unlink()
        workdir.rmdir()
