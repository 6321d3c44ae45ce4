"""DREAM per scope (issue 9.4): derived rows belong to one scope, every dream selector gives a
caller only what its scopes may see, every LLM prompt carries one scope's memories and no secret,
and what DREAM writes stays in the scope its sources came from."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from dream.models import (
    DreamRunStatus,
    EmbeddingCluster,
    EmbeddingClusterMember,
    EntityNode,
    TopicCluster,
)
from dream.pipeline import dream_run
from dream.selectors import (
    attention_heatmap_read,
    clusters_route,
    entity_graph_read,
    soft_clusters_read,
    topic_clusters_read,
)
from memory.models import AttentionEvent, AuditEvent, Memory, Narrative, SelfConcept, Thread
from memory.services.embedding import memories_embed, vector_from_bytes
from memory.services.scopes import scope_visible_ids
from memory.services.self_concept import self_concept_current, self_concept_write
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.fakes.llm_server import json_answer

CANARY_A = "zanzibarquokka"
CANARY_B = "tangelomarmot"
CANARY_GLOBAL = "globalheron"
ENTITY_A = "Quokkaman"
SECRETS = ("vault-code-marmalade-991", "badger-773-passphrase", "heron-secret-4410")

TOPICS = [
    "We chose SQLite with WAL for the archive index",
    "The import locked under two concurrent writers",
    "A walk along the harbour at low tide",
    "Practising a Chopin nocturne, the left hand is slow",
    "The hosting bill doubled this month",
    "Budget review: cut the unused staging server",
    "The parser refactor broke the date tests",
    "Reviewed the migration plan for the search index",
    "Tea in the morning keeps the first hour calm",
    "The release notes need a section on upgrades",
    "Benchmarks show recall dropping on long questions",
    "The owner asked for Chinese summaries in the panel",
    "Backups now run nightly to the second disk",
    "The login page needs a throttle for failed attempts",
    "Sketching the architecture of the sync protocol",
]


def _seed_scope(scope, write_narrative, canary: str, secret: str, *, entity: str = "") -> list:
    written = []
    for index, text in enumerate(TOPICS):
        extra = {}
        if index < 3:
            text = f"{text} ({canary} came up)"
            if entity:
                extra["entities_role"] = f"{entity}=判断+执行; Helper=审查"
        written.append(write_narrative(scope, f"{text} · {scope.label}", **extra))
    written.append(write_narrative(scope, f"{secret} {canary}", secret=True, importance=5))
    memories_embed(memory_ids=[n.pk for n in written])
    return written


@pytest.fixture
def three_scopes(global_scope, project_scope, other_project_scope, write_narrative):
    stores = {
        "a": _seed_scope(project_scope, write_narrative, CANARY_A, SECRETS[0], entity=ENTITY_A),
        "b": _seed_scope(other_project_scope, write_narrative, CANARY_B, SECRETS[1]),
        "global": _seed_scope(global_scope, write_narrative, CANARY_GLOBAL, SECRETS[2]),
    }
    assert dream_run(layer="script").status == DreamRunStatus.OK
    return stores


def _dumped(value) -> str:
    return json.dumps(value, ensure_ascii=False, default=str).lower()


def test_it_builds_every_cluster_from_one_scopes_members(three_scopes, project_scope):
    quokka = TopicCluster.objects.get(term=CANARY_A)
    assert quokka.scope_id == project_scope.pk and quokka.size == 3
    assert not TopicCluster.objects.filter(term=CANARY_A).exclude(scope=project_scope).exists()
    assert EmbeddingCluster.objects.values("scope_id").distinct().count() == 3
    for member in EmbeddingClusterMember.objects.select_related("cluster", "memory"):
        assert member.memory.scope_id == member.cluster.scope_id
    for cluster in EmbeddingCluster.objects.exclude(scope=project_scope):
        assert CANARY_A not in cluster.name.lower()
    for cluster in EmbeddingCluster.objects.all():
        assert not any(secret in cluster.name for secret in SECRETS)
    assert set(EntityNode.objects.filter(name=ENTITY_A).values_list("scope_id", flat=True)) == {
        project_scope.pk
    }


def test_it_gives_a_project_b_caller_no_project_a_text_counts_or_secrets(
    three_scopes, project_scope, other_project_scope
):
    a_ids = {n.pk for n in three_scopes["a"]}
    b_secret = three_scopes["b"][-1]
    now = timezone.now()
    events = [(three_scopes["a"][0], 5), (three_scopes["b"][0], 2), (b_secret, 4)]
    for narrative, count in events:
        for offset in range(count):
            AttentionEvent.objects.create(
                memory=narrative, source="t1_prefetch", occurred_at=now - timedelta(minutes=offset)
            )
    visible = scope_visible_ids(scope=other_project_scope)
    visible_memories = set(
        Memory.objects.filter(scope_id__in=visible, secret=False).values_list("pk", flat=True)
    )
    allowed_clusters = set(
        EmbeddingCluster.objects.filter(scope_id__in=visible).values_list("pk", flat=True)
    )

    topics = topic_clusters_read(scope_ids=visible, min_members=1)
    soft = soft_clusters_read(scope_ids=visible)
    graph = entity_graph_read(scope_ids=visible)
    heatmap = attention_heatmap_read(days=7, scope_ids=visible)
    a_vector = vector_from_bytes(bytes(Narrative.objects.get(pk=three_scopes["a"][0].pk).embedding))
    route = clusters_route(vector=a_vector, scope_ids=visible)

    for name, value in {
        "topics": topics,
        "soft": soft,
        "graph": graph,
        "heatmap": heatmap,
        "route": route,
    }.items():
        text = _dumped(value)
        assert CANARY_A not in text and ENTITY_A.lower() not in text, name
        assert project_scope.label.lower() not in text, name
        assert not any(secret in text for secret in SECRETS), name
    assert CANARY_B in _dumped(topics) and CANARY_B in _dumped(heatmap)
    assert {entry["term"] for entry in topics} >= {CANARY_B, CANARY_GLOBAL}
    assert all(set(entry["scope_ids"]) <= set(visible) for entry in topics)
    for cluster in soft:
        assert set(cluster["member_ids"]) <= visible_memories
        assert not set(cluster["member_ids"]) & a_ids
        assert cluster["size"] == len(cluster["member_ids"])
        assert {n["id"] for n in cluster["neighbours"]} <= allowed_clusters
    assert {row["id"] for row in heatmap["clusters"]} <= allowed_clusters
    # Only B's two non-secret recalls count: A's five and the secret's four never show.
    assert heatmap["events"] == 2
    assert sum(row["size"] for row in heatmap["clusters"]) == sum(c["size"] for c in soft)
    assert set(route["primary"]) | set(route["neighbours"]) <= allowed_clusters

    owner = attention_heatmap_read(days=7)
    assert owner["events"] == 11
    assert topic_clusters_read(scope_ids=visible, min_members=1, include_secret=True)


def _prompts(fake) -> list[tuple[str, str]]:
    return [
        (request["body"]["messages"][0]["content"], request["body"]["messages"][1]["content"])
        for request in fake.requests
    ]


def _today(scope, write_narrative, text: str, **fields):
    narrative = write_narrative(scope, text, **fields)
    memories_embed(memory_ids=[narrative.pk])
    return narrative


def test_it_prompts_one_scope_at_a_time_and_never_sends_a_secret(
    fake_llm, global_scope, project_scope, other_project_scope, write_narrative
):
    scopes = {
        CANARY_A: project_scope,
        CANARY_B: other_project_scope,
        CANARY_GLOBAL: global_scope,
    }
    for (canary, scope), secret in zip(scopes.items(), SECRETS, strict=True):
        _today(scope, write_narrative, f"Today the {canary} plan moved forward", importance=4)
        _today(scope, write_narrative, f"The {canary} review found two gaps", emotional=4)
        _today(scope, write_narrative, f"{secret} for {canary}", secret=True, importance=5)
        if scope != global_scope:
            session = session_start(runtime="test", external_id=canary, scope_id=scope.pk)
            turns_record(
                session_id=session.pk,
                turns=[
                    TurnInput(role="user", content=f"let us talk about {canary} today"),
                    TurnInput(role="assistant", content=f"{canary} needs a migration"),
                    TurnInput(role="user", content=f"write the {canary} notes tomorrow"),
                ],
            )
    run = dream_run()
    prompts = _prompts(fake_llm)
    assert run.status in {DreamRunStatus.OK, DreamRunStatus.PARTIAL}
    combing = [user for system, user in prompts if system.startswith("# DREAM · Combing")]
    dreams = [user for system, user in prompts if system.startswith("# DREAM · Symbolic")]
    solidify = [user for system, user in prompts if system.startswith("# DREAM · Layer 0")]
    assert len(combing) == 3 and len(dreams) == 3 and len(solidify) == 2
    seen = set()
    for _, user in prompts:
        assert not any(secret in user for secret in SECRETS), user[:300]
        owners = {canary for canary in (CANARY_A, CANARY_B) if canary in user}
        assert len(owners) <= 1, user[:300]
        seen |= owners
    assert seen == {CANARY_A, CANARY_B}


def test_it_leaves_the_global_self_concept_alone_when_combing_a_project(
    fake_llm, global_scope, project_scope, write_narrative
):
    self_concept_write(field="fact", content="I am the coding agent of this workspace")
    before = (SelfConcept.objects.count(), self_concept_current(field="fact").content)
    today = _today(project_scope, write_narrative, f"The {CANARY_A} launch slipped a week")
    fake_llm.script(
        json_answer(
            {
                "self_concept": [{"field": "fact", "content": f"I am the {CANARY_A} agent"}],
                "threads": [{"content": f"Ask why the {CANARY_A} launch slipped"}],
            }
        )
    )
    run = dream_run(layer="combing")
    assert run.status == DreamRunStatus.OK, run.error
    assert (SelfConcept.objects.count(), self_concept_current(field="fact").content) == before
    report = run.stats["layers"]["combing"]["scopes"][str(project_scope.pk)]
    assert "changes only from global memories" in report["self_concept_skipped"]
    thread = Thread.objects.get()
    assert thread.scope_id == project_scope.pk == today.scope_id
    assert '"kind": "project"' in fake_llm.requests[0]["body"]["messages"][1]["content"]

    _today(global_scope, write_narrative, "The owner now prefers answers in Spanish")
    fake_llm.script(
        json_answer({"self_concept": [{"field": "fact", "content": "I answer in Spanish"}]})
    )
    again = dream_run(layer="combing", force=True)
    assert self_concept_current(field="fact").content == "I answer in Spanish"
    assert again.stats["layers"]["combing"]["written"]["self_concept"]


def test_it_stamps_every_audit_row_of_a_run_with_its_request_id(
    fake_llm, project_scope, write_narrative
):
    today = _today(project_scope, write_narrative, "The archive import finished overnight")
    session = session_start(runtime="test", external_id="audit", scope_id=project_scope.pk)
    turns = turns_record(
        session_id=session.pk,
        turns=[TurnInput(role="user", content=f"turn {n} on the archive import") for n in range(3)],
    )
    fake_llm.script(
        json_answer(
            {
                "narratives": [
                    {
                        "gesture": "We watched the archive import finish",
                        "importance": 3,
                        "emotional": 2,
                        "unresolved": 1,
                        "source_turn_ids": [turn.pk for turn in turns],
                    }
                ]
            }
        ),
        json_answer(
            {
                "rescore": [{"id": today.pk, "importance": 5, "emotional": 3, "unresolved": 2}],
                "threads": [{"content": "Check the archive import's error log"}],
            }
        ),
    )
    started = timezone.now()
    run = dream_run()
    rows = AuditEvent.objects.filter(occurred_at__gte=started)
    assert rows.filter(actor="llm").count() >= 3
    assert rows.filter(actor="system").exists()
    assert set(rows.values_list("request_id", flat=True)) == {f"dream-run-{run.pk}"}
    assert set(rows.values_list("actor", flat=True)) <= {"llm", "system", "rule"}


def test_it_keeps_project_a_out_of_a_project_b_keys_attention_over_rest(
    three_scopes, other_project_scope, client
):
    from injection.services.access import apikey_create

    for narrative in three_scopes["a"][:3] + three_scopes["b"][:1]:
        AttentionEvent.objects.create(memory=narrative, source="mcp_search")
    _, raw = apikey_create(name="project b agent", scope_ids=[other_project_scope.pk])
    response = client.get("/api/v1/attention?days=7", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    body = response.json()
    text = _dumped(body)
    assert CANARY_A not in text and not any(secret in text for secret in SECRETS)
    assert CANARY_B in text and body["events"] == 1
