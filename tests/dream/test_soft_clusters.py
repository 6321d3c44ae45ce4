from collections import Counter, defaultdict
from itertools import combinations

import numpy as np
import pytest

from dream.models import EmbeddingCluster, EmbeddingClusterAdjacency, EmbeddingClusterMember
from dream.script_layer import soft_assign, soft_clusters_rebuild, soft_k
from dream.selectors import attention_heatmap_read, clusters_route, soft_clusters_read
from memory.models import AttentionEvent, AuditEvent, Narrative
from memory.services.embedding import memories_embed, vector_from_bytes

TOPICS = [
    "cooking dinner with garlic and tomatoes",
    "debugging a race condition in the scheduler",
    "a walk along the sea at low tide",
    "reviewing the quarterly budget spreadsheet",
    "learning to play a new piano piece",
]


@pytest.fixture
def hundred(global_scope, write_narrative):
    narratives = [
        write_narrative(global_scope, f"{TOPICS[i % 5]}, note number {i}") for i in range(100)
    ]
    memories_embed(memory_ids=[n.pk for n in narratives])
    return narratives


def test_it_sizes_k_from_the_number_of_narratives():
    assert [soft_k(n) for n in (1, 3, 5, 6, 20, 100, 10_000)] == [1, 3, 5, 5, 6, 15, 150]


def test_it_puts_each_of_a_hundred_narratives_in_three_of_fifteen_clusters_with_adjacency(
    hundred,
):
    stats = soft_clusters_rebuild()
    assert stats["clusters"] == 15 and stats["narratives"] == 100 and stats["changed"]
    assert EmbeddingCluster.objects.count() == 15
    per_memory = Counter(EmbeddingClusterMember.objects.values_list("memory_id", flat=True))
    assert set(per_memory) == {n.pk for n in hundred}
    assert set(per_memory.values()) == {3}
    ranks = defaultdict(list)
    for memory_id, rank, distance in EmbeddingClusterMember.objects.values_list(
        "memory_id", "rank", "distance"
    ):
        ranks[memory_id].append((rank, distance))
    for pairs in ranks.values():
        pairs.sort()
        assert [rank for rank, _ in pairs] == [1, 2, 3]
        assert [d for _, d in pairs] == sorted(d for _, d in pairs)  # nearest first
    for cluster in EmbeddingCluster.objects.all():
        assert cluster.size == cluster.members.count()
        assert cluster.name

    # Adjacency: how many narratives each pair of clusters shares.
    clusters_of = defaultdict(set)
    for memory_id, cluster_id in EmbeddingClusterMember.objects.values_list(
        "memory_id", "cluster_id"
    ):
        clusters_of[memory_id].add(cluster_id)
    expected = Counter()
    for clusters in clusters_of.values():
        for a, b in combinations(sorted(clusters), 2):
            expected[(a, b)] += 1
    stored = {
        (min(a, b), max(a, b)): shared
        for a, b, shared in EmbeddingClusterAdjacency.objects.values_list(
            "cluster_a_id", "cluster_b_id", "shared"
        )
    }
    assert stored == dict(expected)
    assert sum(stored.values()) == 100 * 3  # three pairs per narrative

    # Idempotent: same vectors, same clusters, nothing rewritten or audited twice.
    assert soft_clusters_rebuild()["changed"] is False
    assert AuditEvent.objects.filter(target_type="embeddingcluster").count() == 1


def test_it_routes_queries_and_never_reports_a_lit_cluster_as_a_desert(hundred):
    soft_clusters_rebuild()
    target = hundred[1]
    vector = vector_from_bytes(bytes(Narrative.objects.get(pk=target.pk).embedding))
    route = clusters_route(vector=vector, scope_ids=None)
    home = EmbeddingClusterMember.objects.get(memory_id=target.pk, rank=1).cluster_id
    assert len(route["primary"]) == 3 and home in route["primary"]
    assert route["neighbours"] and not set(route["neighbours"]) & set(route["primary"])
    by_text = clusters_route(query=TOPICS[1], scope_ids=[target.scope_id])
    assert len(by_text["primary"]) == 3
    assert clusters_route(vector=vector, scope_ids=[target.scope_id + 1000]) == {
        "primary": [],
        "neighbours": [],
    }
    read = soft_clusters_read(scope_ids=[hundred[0].scope_id])
    assert len(read) == 15 and sum(c["size"] for c in read) == 300

    # Attention: a recall lights the clusters of its memory; those are never deserts.
    hit = hundred[0]
    AttentionEvent.objects.create(memory=hit, source="t1_prefetch", similarity=0.8)
    heatmap = attention_heatmap_read(days=7)
    lit_expected = set(
        EmbeddingClusterMember.objects.filter(memory=hit).values_list("cluster_id", flat=True)
    )
    assert set(heatmap["lit"]) == lit_expected
    assert not set(heatmap["lit"]) & set(heatmap["deserts"])
    assert len(heatmap["lit"]) + len(heatmap["deserts"]) == 15
    assert heatmap["events"] == 1
    row = next(r for r in heatmap["clusters"] if r["id"] in lit_expected)
    assert row["by_day"][-1] == 1 and len(row["by_day"]) == 7


def test_it_uses_k_equal_to_n_for_three_narratives(global_scope, write_narrative):
    narratives = [write_narrative(global_scope, text) for text in TOPICS[:3]]
    memories_embed(memory_ids=[n.pk for n in narratives])
    stats = soft_clusters_rebuild()
    assert stats["clusters"] == 3
    assert Counter(EmbeddingClusterMember.objects.values_list("memory_id", flat=True)) == {
        n.pk: 3 for n in narratives
    }


def test_it_assigns_fewer_than_three_when_k_is_below_three():
    centroids, nearest, _distances = soft_assign(np.eye(2, 8, dtype=np.float32))
    assert len(centroids) == 2 and nearest.shape == (2, 2)


def layout(clusters: list[dict]) -> list[tuple]:
    index_of = {cluster["id"]: cluster["index"] for cluster in clusters}
    return [
        (
            cluster["index"],
            cluster["name"],
            cluster["member_ids"],
            [(index_of[n["id"]], n["shared"]) for n in cluster["neighbours"]],
        )
        for cluster in clusters
    ]


def test_it_fits_the_clusters_an_agent_reads_on_what_an_agent_may_see(
    global_scope, write_narrative
):
    shown = [write_narrative(global_scope, f"{TOPICS[i % 5]}, note number {i}") for i in range(20)]
    memories_embed(memory_ids=[n.pk for n in shown])
    soft_clusters_rebuild()
    before = soft_clusters_read(scope_ids=[global_scope.pk])
    secrets = [
        write_narrative(global_scope, f"secret diary {i} about the sea", secret=True)
        for i in range(30)
    ]
    memories_embed(memory_ids=[n.pk for n in secrets])
    soft_clusters_rebuild()

    after = soft_clusters_read(scope_ids=[global_scope.pk])
    # A rebuild stores the clusters anew: they are compared by index, not by row id.
    assert layout(after) == layout(before)
    # The owner still finds every secret placed in the clusters.
    placed = {
        pk
        for c in soft_clusters_read(scope_ids=[global_scope.pk], include_secret=True)
        for pk in c["member_ids"]
    }
    assert {n.pk for n in secrets} <= placed
