"""Read-only views of what DREAM derived, as plain dicts, for injection, MCP, REST and the admin.

Clusters and graphs are built over every memory; each reader filters by the caller's visible
scopes, so counts, names and examples only ever come from memories the caller may see.
"""

from collections import defaultdict
from datetime import timedelta

import numpy as np
from django.db.models import Count
from django.utils import timezone

from dream.models import (
    DreamRun,
    EmbeddingCluster,
    EmbeddingClusterAdjacency,
    EmbeddingClusterMember,
    EntityEdge,
    EntityNode,
    TopicCluster,
    TopicClusterMember,
)
from memory.models import AttentionEvent, MemoryStatus, Narrative
from memory.services.embedding import vector_from_bytes, vectors_normalise

EXAMPLES_PER_CLUSTER = 2


def _examples(narratives) -> list[dict]:
    """The highest-weight non-secret narratives of a queryset (already filtered to what the caller
    may see)."""
    rows = (
        narratives.filter(secret=False)
        .order_by("-weight", "-pk")
        .values("pk", "gesture", "weight")[:EXAMPLES_PER_CLUSTER]
    )
    return [{"id": row["pk"], "gesture": row["gesture"], "weight": row["weight"]} for row in rows]


def topic_clusters_read(
    *, scope_ids: list[int], min_members: int = 5, limit: int = 25
) -> list[dict]:
    """Topic clusters with at least `min_members` active narratives visible in `scope_ids`, largest
    first: {"id", "term", "terms", "size", "examples": [{"id", "gesture", "weight"}]}."""
    counted = (
        TopicClusterMember.objects.filter(
            narrative__scope_id__in=scope_ids, narrative__status=MemoryStatus.ACTIVE
        )
        .values("cluster_id")
        .annotate(visible=Count("id"))
        .filter(visible__gte=min_members)
        .order_by("-visible", "cluster_id")[:limit]
    )
    sizes = {row["cluster_id"]: row["visible"] for row in counted}
    clusters = TopicCluster.objects.in_bulk(list(sizes))
    result = []
    for cluster_id, size in sizes.items():
        cluster = clusters[cluster_id]
        visible = Narrative.objects.filter(
            topic_memberships__cluster=cluster,
            scope_id__in=scope_ids,
            status=MemoryStatus.ACTIVE,
        )
        result.append(
            {
                "id": cluster.pk,
                "term": cluster.term,
                "terms": cluster.terms or [cluster.term],
                "size": size,
                "examples": _examples(visible),
            }
        )
    return result


def soft_clusters_read(*, scope_ids: list[int]) -> list[dict]:
    """Embedding clusters with visible members: {"id", "index", "name", "size", "member_ids"
    (nearest first), "neighbours": [{"id", "shared"}]}. The name comes from the top-weight visible
    member, so it never quotes another scope's memory."""
    members = (
        EmbeddingClusterMember.objects.filter(
            memory__scope_id__in=scope_ids, memory__status=MemoryStatus.ACTIVE
        )
        .order_by("cluster_id", "distance")
        .values_list("cluster_id", "memory_id")
    )
    by_cluster: dict[int, list[int]] = defaultdict(list)
    for cluster_id, memory_id in members:
        by_cluster[cluster_id].append(memory_id)
    neighbours = _neighbours(list(by_cluster))
    result = []
    for cluster in EmbeddingCluster.objects.filter(pk__in=list(by_cluster)).order_by("index"):
        member_ids = by_cluster[cluster.pk]
        examples = _examples(Narrative.objects.filter(pk__in=member_ids))
        result.append(
            {
                "id": cluster.pk,
                "index": cluster.index,
                "name": examples[0]["gesture"][:80] if examples else f"cluster {cluster.index}",
                "size": len(member_ids),
                "member_ids": member_ids,
                "neighbours": [
                    {"id": other, "shared": shared}
                    for other, shared in neighbours.get(cluster.pk, [])
                    if other in by_cluster
                ],
            }
        )
    return result


def _neighbours(cluster_ids: list[int]) -> dict[int, list[tuple[int, int]]]:
    result: dict[int, list[tuple[int, int]]] = defaultdict(list)
    rows = EmbeddingClusterAdjacency.objects.filter(
        cluster_a_id__in=cluster_ids
    ) | EmbeddingClusterAdjacency.objects.filter(cluster_b_id__in=cluster_ids)
    for a, b, shared in rows.values_list("cluster_a_id", "cluster_b_id", "shared"):
        result[a].append((b, shared))
        result[b].append((a, shared))
    for pairs in result.values():
        pairs.sort(key=lambda pair: (-pair[1], pair[0]))
    return result


def entity_graph_read(*, scope_ids: list[int]) -> dict:
    """The entity co-occurrence graph over `scope_ids`, merged by name: {"nodes": [{"name",
    "mentions", "roles", "profile_id"}], "edges": [{"a", "b", "cooccurrence", "role_pairs":
    [{"a_roles", "b_roles", "count"}]}]}."""
    nodes: dict[str, dict] = {}
    for node in EntityNode.objects.filter(scope_id__in=scope_ids).order_by("name", "scope_id"):
        entry = nodes.setdefault(
            node.name,
            {"name": node.name, "mentions": 0, "roles": {}, "profile_id": node.profile_id},
        )
        entry["mentions"] += node.mentions
        for role, count in node.roles.items():
            entry["roles"][role] = entry["roles"].get(role, 0) + count
        entry["profile_id"] = entry["profile_id"] or node.profile_id
    edges: dict[tuple[str, str], dict] = {}
    for edge in EntityEdge.objects.filter(scope_id__in=scope_ids).select_related(
        "node_a", "node_b"
    ):
        key = (edge.node_a.name, edge.node_b.name)
        entry = edges.setdefault(key, {"a": key[0], "b": key[1], "cooccurrence": 0, "pairs": {}})
        entry["cooccurrence"] += edge.cooccurrence
        for pair, count in edge.role_pairs.items():
            entry["pairs"][pair] = entry["pairs"].get(pair, 0) + count
    edge_list = []
    for entry in sorted(edges.values(), key=lambda e: (-e["cooccurrence"], e["a"], e["b"])):
        pairs = entry.pop("pairs")
        entry["role_pairs"] = [
            {"a_roles": key.split("|", 1)[0], "b_roles": key.split("|", 1)[1], "count": count}
            for key, count in sorted(pairs.items(), key=lambda item: (-item[1], item[0]))
        ]
        edge_list.append(entry)
    node_list = sorted(nodes.values(), key=lambda n: (-n["mentions"], n["name"]))
    return {"nodes": node_list, "edges": edge_list}


def attention_heatmap_read(*, days: int = 30, scope_ids: list[int] | None = None) -> dict:
    """Recall attention per embedding cluster and day over the last `days` days.

    A recall of a memory lights every cluster the memory belongs to. `heat` and `deserts` come from
    the same counts, so a lit cluster is never a desert. Returns {"days": [iso dates], "clusters":
    [{"id", "index", "name", "size", "heat", "by_day": [counts per day]}], "lit": [ids], "deserts":
    [ids], "events": total recalls counted}. `scope_ids` limits everything to those scopes (None:
    the owner's view of all)."""
    days = max(1, int(days))
    today = timezone.localdate()
    first_day = today - timedelta(days=days - 1)
    day_list = [first_day + timedelta(days=offset) for offset in range(days)]
    day_index = {day: position for position, day in enumerate(day_list)}
    clusters = EmbeddingCluster.objects.order_by("index")
    memberships = EmbeddingClusterMember.objects.all()
    events = AttentionEvent.objects.filter(
        occurred_at__date__gte=first_day, occurred_at__date__lte=today
    )
    if scope_ids is not None:
        memberships = memberships.filter(memory__scope_id__in=scope_ids)
        events = events.filter(memory__scope_id__in=scope_ids)
        clusters = clusters.filter(pk__in=memberships.values("cluster_id"))
    clusters_of: dict[int, list[int]] = defaultdict(list)
    for cluster_id, memory_id in memberships.values_list("cluster_id", "memory_id"):
        clusters_of[memory_id].append(cluster_id)
    grid: dict[int, list[int]] = {cluster.pk: [0] * days for cluster in clusters}
    counted = 0
    for memory_id, occurred_at in events.values_list("memory_id", "occurred_at"):
        position = day_index.get(timezone.localdate(occurred_at))
        hit = [cid for cid in clusters_of.get(memory_id, ()) if cid in grid]
        if position is None or not hit:
            continue
        counted += 1
        for cluster_id in hit:
            grid[cluster_id][position] += 1
    rows = []
    for cluster in clusters:
        by_day = grid[cluster.pk]
        rows.append(
            {
                "id": cluster.pk,
                "index": cluster.index,
                "name": cluster.name,
                "size": cluster.size,
                "heat": sum(by_day),
                "by_day": by_day,
            }
        )
    return {
        "days": [day.isoformat() for day in day_list],
        "clusters": rows,
        "lit": [row["id"] for row in rows if row["heat"] > 0],
        "deserts": [row["id"] for row in rows if row["heat"] == 0],
        "events": counted,
    }


def dream_runs_recent(*, limit: int = 10) -> list[dict]:
    return [
        {
            "id": run.pk,
            "layer": run.layer,
            "day": run.day.isoformat(),
            "status": run.status,
            "trigger": run.trigger,
            "started_at": run.started_at.isoformat(),
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "tokens": run.tokens,
            "error": run.error,
            "stats": run.stats,
        }
        for run in DreamRun.objects.order_by("-started_at", "-id")[: max(1, int(limit))]
    ]


def clusters_route(
    *,
    vector: np.ndarray | None = None,
    query: str = "",
    scope_ids: list[int] | None = None,
    top: int = 3,
    hops: int = 3,
) -> dict:
    """Query routing: the `top` soft clusters nearest the query (a vector, or text embedded with the
    configured embedder), plus each one's `hops` most adjacent neighbours. Returns {"primary":
    [cluster ids], "neighbours": [cluster ids]}; empty lists without clusters or an embedder."""
    if vector is None:
        from memory.services.embedding import embedder_get

        embedder = embedder_get()
        if embedder is None or not query.strip():
            return {"primary": [], "neighbours": []}
        vector = embedder.embed([query])[0]
    clusters = list(EmbeddingCluster.objects.values_list("pk", "centroid"))
    if not clusters:
        return {"primary": [], "neighbours": []}
    if scope_ids is not None:
        visible = set(
            EmbeddingClusterMember.objects.filter(memory__scope_id__in=scope_ids).values_list(
                "cluster_id", flat=True
            )
        )
        clusters = [(pk, blob) for pk, blob in clusters if pk in visible]
        if not clusters:
            return {"primary": [], "neighbours": []}
    centroids = vectors_normalise(np.vstack([vector_from_bytes(bytes(b)) for _, b in clusters]))
    target = vectors_normalise(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]
    if target.shape[0] != centroids.shape[1]:
        # Clusters built from another embedding model's vectors: no shared space to route in.
        return {"primary": [], "neighbours": []}
    order = np.argsort(-(centroids @ target), kind="stable")[:top]
    primary = [clusters[i][0] for i in order]
    allowed = {pk for pk, _ in clusters}
    neighbours: list[int] = []
    for cluster_id in primary:
        rows = (
            EmbeddingClusterAdjacency.objects.filter(cluster_a_id=cluster_id).values_list(
                "cluster_b_id", "shared"
            )
        ).union(
            EmbeddingClusterAdjacency.objects.filter(cluster_b_id=cluster_id).values_list(
                "cluster_a_id", "shared"
            )
        )
        ranked = sorted(rows, key=lambda pair: (-pair[1], pair[0]))
        picked = [pk for pk, _ in ranked if pk in allowed and pk not in primary][:hops]
        neighbours.extend(pk for pk in picked if pk not in neighbours)
    return {"primary": primary, "neighbours": neighbours}
