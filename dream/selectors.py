"""Read-only views of what DREAM derived, as plain dicts, for injection, MCP, REST and the admin.

Clusters belong to one scope each. A reader passes the scopes its caller may see (`scope_ids`): it
gets only clusters of those scopes, with names, sizes, examples, neighbours and attention counted
from the members it may see — active and valid now, in those scopes, and never secret unless
`include_secret` (the owner's view). No text or count of another scope, or of a secret memory, reaches an agent.
"""

from collections import defaultdict
from datetime import timedelta

import numpy as np
from django.db.models import Count, Q
from django.utils import timezone

from dream.models import (
    DreamRun,
    EmbeddingCluster,
    EmbeddingClusterAdjacency,
    EmbeddingClusterMember,
    EntityEdge,
    EntityNode,
    TopicClusterMember,
)
from memory.models import AttentionEvent, MemoryStatus, Narrative
from memory.selectors.visibility import LOCAL_AGENT, OWNER, profiles_visible
from memory.services.embedding import vector_from_bytes, vectors_normalise

EXAMPLES_PER_CLUSTER = 2
NAME_MEMBERS = 2


def _examples(narratives) -> list[dict]:
    """The highest-weight non-secret narratives of a queryset (already filtered to what the caller
    may see): an example quotes text, and secret text is shown to nobody but the owner's pages."""
    rows = (
        narratives.filter(secret=False)
        .order_by("-weight", "-pk")
        .values("pk", "gesture", "weight")[:EXAMPLES_PER_CLUSTER]
    )
    return [{"id": row["pk"], "gesture": row["gesture"], "weight": row["weight"]} for row in rows]


def _visible(prefix: str, *, scope_ids: list[int], include_secret: bool) -> Q:
    """The members a caller of `scope_ids` may count: current, in its scopes, secret only for the
    owner's view. Current means valid now too: a memory written ahead of its time ("on call from
    March") is not true yet, and one whose time ended no longer is; T2 and T1 leave both out, and
    a cluster's example or count must not bring them back."""
    now = timezone.now()
    rule = Q(
        **{
            f"{prefix}scope_id__in": scope_ids,
            f"{prefix}status": MemoryStatus.ACTIVE,
            f"{prefix}valid_from__lte": now,
        }
    ) & (Q(**{f"{prefix}valid_to__isnull": True}) | Q(**{f"{prefix}valid_to__gt": now}))
    if not include_secret:
        rule &= Q(**{f"{prefix}secret": False})
    return rule


def topic_clusters_read(
    *,
    scope_ids: list[int],
    min_members: int = 5,
    limit: int = 25,
    include_secret: bool = False,
) -> list[dict]:
    """Topic clusters of `scope_ids` with at least `min_members` visible narratives, largest
    first. One term found in several visible scopes is one entry counting all its visible members:
    {"id", "ids", "scope_ids", "term", "terms", "size", "examples": [{"id", "gesture", "weight"}]}."""
    visible = _visible("narrative__", scope_ids=scope_ids, include_secret=include_secret)
    counted = (
        TopicClusterMember.objects.filter(visible, cluster__scope_id__in=scope_ids)
        .values("cluster_id", "cluster__scope_id", "cluster__term", "cluster__terms")
        .annotate(visible=Count("id"))
        .order_by("cluster_id")
    )
    # A narrative lies in one scope, so one term's clusters in several scopes share no member:
    # its visible size is the sum of theirs.
    by_term: dict[str, dict] = {}
    for row in counted:
        term = row["cluster__term"]
        entry = by_term.setdefault(term, {"ids": [], "scope_ids": [], "terms": [], "size": 0})
        entry["ids"].append(row["cluster_id"])
        entry["scope_ids"].append(row["cluster__scope_id"])
        entry["terms"] += [t for t in (row["cluster__terms"] or [term]) if t not in entry["terms"]]
        entry["size"] += row["visible"]
    kept = sorted(
        (item for item in by_term.items() if item[1]["size"] >= min_members),
        key=lambda item: (-item[1]["size"], item[1]["ids"][0]),
    )[:limit]
    return [
        {
            "id": entry["ids"][0],
            "ids": entry["ids"],
            "scope_ids": sorted(set(entry["scope_ids"])),
            "term": term,
            "terms": entry["terms"] or [term],
            "size": entry["size"],
            "examples": _examples(
                Narrative.objects.filter(
                    _visible("", scope_ids=scope_ids, include_secret=include_secret),
                    topic_memberships__cluster_id__in=entry["ids"],
                )
            ),
        }
        for term, entry in kept
    ]


def _soft_members(*, scope_ids: list[int], include_secret: bool):
    return EmbeddingClusterMember.objects.filter(
        _visible("memory__", scope_ids=scope_ids, include_secret=include_secret),
        cluster__scope_id__in=scope_ids,
    )


def _names_from(members_of: dict[int, list[int]], clusters) -> dict[int, str]:
    """A cluster's name from its highest-weight non-secret nearest members among those given."""
    weights = dict(
        Narrative.objects.filter(
            pk__in={pk for ids in members_of.values() for pk in ids}, secret=False
        ).values_list("pk", "weight")
    )
    top = {
        cluster_id: sorted((pk for pk in ids if pk in weights), key=lambda pk: (-weights[pk], pk))[
            :NAME_MEMBERS
        ]
        for cluster_id, ids in members_of.items()
    }
    gestures = dict(
        Narrative.objects.filter(pk__in={pk for ids in top.values() for pk in ids}).values_list(
            "pk", "gesture"
        )
    )
    return {
        cluster.pk: " / ".join(gestures[pk][:60] for pk in top.get(cluster.pk, []))[:300]
        or f"cluster {cluster.index}"
        for cluster in clusters
    }


def _visible_layout(*, scope_ids: list[int], include_secret: bool):
    """(cluster id → visible member ids nearest first, memory id → its clusters, cluster id →
    visible rank-1 members) for the caller."""
    by_cluster: dict[int, list[int]] = defaultdict(list)
    clusters_of: dict[int, list[int]] = defaultdict(list)
    nearest: dict[int, list[int]] = defaultdict(list)
    rows = _soft_members(scope_ids=scope_ids, include_secret=include_secret).order_by(
        "cluster_id", "distance", "memory_id"
    )
    for cluster_id, memory_id, rank in rows.values_list("cluster_id", "memory_id", "rank"):
        by_cluster[cluster_id].append(memory_id)
        clusters_of[memory_id].append(cluster_id)
        if rank == 1:
            nearest[cluster_id].append(memory_id)
    return by_cluster, clusters_of, nearest


def _shared_counts(clusters_of: dict[int, list[int]]) -> dict[int, list[tuple[int, int]]]:
    """Adjacency counted from the visible members only: how many of them two clusters share."""
    pairs: dict[tuple[int, int], int] = defaultdict(int)
    for cluster_ids in clusters_of.values():
        ordered = sorted(set(cluster_ids))
        for i, a in enumerate(ordered):
            for b in ordered[i + 1 :]:
                pairs[(a, b)] += 1
    result: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for (a, b), shared in pairs.items():
        result[a].append((b, shared))
        result[b].append((a, shared))
    for neighbours in result.values():
        neighbours.sort(key=lambda pair: (-pair[1], pair[0]))
    return result


def soft_clusters_read(*, scope_ids: list[int], include_secret: bool = False) -> list[dict]:
    """Embedding clusters of `scope_ids` with visible members: {"id", "scope_id", "index", "name",
    "size", "member_ids" (nearest first), "neighbours": [{"id", "shared"}]}. Name, size and shared
    counts come from the visible members only."""
    by_cluster, clusters_of, nearest = _visible_layout(
        scope_ids=scope_ids, include_secret=include_secret
    )
    neighbours = _shared_counts(clusters_of)
    clusters = list(
        EmbeddingCluster.objects.filter(pk__in=list(by_cluster)).order_by("scope_id", "index")
    )
    names = _names_from({c.pk: nearest.get(c.pk) or by_cluster[c.pk] for c in clusters}, clusters)
    return [
        {
            "id": cluster.pk,
            "scope_id": cluster.scope_id,
            "index": cluster.index,
            "name": names[cluster.pk],
            "size": len(by_cluster[cluster.pk]),
            "member_ids": by_cluster[cluster.pk],
            "neighbours": [
                {"id": other, "shared": shared} for other, shared in neighbours.get(cluster.pk, [])
            ],
        }
        for cluster in clusters
    ]


def entity_graph_read(*, scope_ids: list[int], include_secret: bool = False) -> dict:
    """The entity co-occurrence graph over `scope_ids` (built per scope from non-secret memories),
    merged by name: {"nodes": [{"name", "mentions", "roles", "profile_id"}], "edges": [{"a", "b",
    "cooccurrence", "role_pairs": [{"a_roles", "b_roles", "count"}]}]}. A node links its profile
    only when the caller may see that profile (one known only from secret facts is withheld)."""
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
    principal = OWNER if include_secret else LOCAL_AGENT
    linked = {entry["profile_id"] for entry in nodes.values()} - {None}
    shown = set(
        profiles_visible(principal=principal, scope_ids=scope_ids)
        .filter(pk__in=linked)
        .values_list("pk", flat=True)
    )
    for entry in nodes.values():
        if entry["profile_id"] not in shown:
            entry["profile_id"] = None
    edges: dict[tuple[str, str], dict] = {}
    for edge in EntityEdge.objects.filter(
        scope_id__in=scope_ids, node_a__scope_id__in=scope_ids, node_b__scope_id__in=scope_ids
    ).select_related("node_a", "node_b"):
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


def attention_heatmap_read(
    *, days: int = 30, scope_ids: list[int] | None = None, include_secret: bool = False
) -> dict:
    """Recall attention per embedding cluster and day over the last `days` days.

    A recall of a memory lights every cluster the memory belongs to. `heat` and `deserts` come from
    the same counts, so a lit cluster is never a desert. Returns {"days": [iso dates], "clusters":
    [{"id", "scope_id", "index", "name", "size", "heat", "by_day": [counts per day]}], "lit":
    [ids], "deserts": [ids], "events": total recalls counted}. With `scope_ids`, only clusters of
    those scopes, named, sized and lit from the members the caller may see; None is the owner's
    view of every scope (stored names, secret members counted)."""
    days = max(1, int(days))
    today = timezone.localdate()
    first_day = today - timedelta(days=days - 1)
    day_list = [first_day + timedelta(days=offset) for offset in range(days)]
    day_index = {day: position for position, day in enumerate(day_list)}
    events = AttentionEvent.objects.filter(
        occurred_at__date__gte=first_day, occurred_at__date__lte=today
    )
    if scope_ids is None:
        clusters = list(EmbeddingCluster.objects.order_by("scope_id", "index"))
        clusters_of: dict[int, list[int]] = defaultdict(list)
        for cluster_id, memory_id in EmbeddingClusterMember.objects.values_list(
            "cluster_id", "memory_id"
        ):
            clusters_of[memory_id].append(cluster_id)
        names = {cluster.pk: cluster.name for cluster in clusters}
        sizes = {cluster.pk: cluster.size for cluster in clusters}
    else:
        by_cluster, clusters_of, nearest = _visible_layout(
            scope_ids=scope_ids, include_secret=include_secret
        )
        clusters = list(
            EmbeddingCluster.objects.filter(pk__in=list(by_cluster)).order_by("scope_id", "index")
        )
        names = _names_from(
            {c.pk: nearest.get(c.pk) or by_cluster[c.pk] for c in clusters}, clusters
        )
        sizes = {cluster.pk: len(by_cluster[cluster.pk]) for cluster in clusters}
        events = events.filter(memory_id__in=list(clusters_of))
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
    rows = [
        {
            "id": cluster.pk,
            "scope_id": cluster.scope_id,
            "index": cluster.index,
            "name": names[cluster.pk],
            "size": sizes[cluster.pk],
            "heat": sum(grid[cluster.pk]),
            "by_day": grid[cluster.pk],
        }
        for cluster in clusters
    ]
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
    include_secret: bool = False,
) -> dict:
    """Query routing: the `top` soft clusters nearest the query (a vector, or text embedded with the
    configured embedder), plus each one's `hops` most adjacent neighbours. With `scope_ids`, only
    clusters of those scopes with members the caller may see, adjacency counted from those members.
    Returns {"primary": [cluster ids], "neighbours": [cluster ids]}; empty lists without clusters
    or an embedder."""
    empty: dict = {"primary": [], "neighbours": []}
    if vector is None:
        from memory.services.embedding import embedder_get

        embedder = embedder_get()
        if embedder is None or not query.strip():
            return empty
        vector = embedder.embed([query])[0]
    if scope_ids is None:
        clusters = list(EmbeddingCluster.objects.values_list("pk", "centroid"))
        neighbours_of = _stored_neighbours([pk for pk, _ in clusters])
    else:
        _, clusters_of, _ = _visible_layout(scope_ids=scope_ids, include_secret=include_secret)
        visible = {cid for ids in clusters_of.values() for cid in ids}
        clusters = list(
            EmbeddingCluster.objects.filter(pk__in=visible).values_list("pk", "centroid")
        )
        neighbours_of = _shared_counts(clusters_of)
    if not clusters:
        return empty
    centroids = vectors_normalise(np.vstack([vector_from_bytes(bytes(b)) for _, b in clusters]))
    target = vectors_normalise(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]
    if target.shape[0] != centroids.shape[1]:
        # Clusters built from another embedding model's vectors: no shared space to route in.
        return empty
    order = np.argsort(-(centroids @ target), kind="stable")[:top]
    primary = [clusters[i][0] for i in order]
    allowed = {pk for pk, _ in clusters}
    neighbours: list[int] = []
    for cluster_id in primary:
        ranked = neighbours_of.get(cluster_id, [])
        picked = [pk for pk, _ in ranked if pk in allowed and pk not in primary][:hops]
        neighbours.extend(pk for pk in picked if pk not in neighbours)
    return {"primary": primary, "neighbours": neighbours}


def _stored_neighbours(cluster_ids: list[int]) -> dict[int, list[tuple[int, int]]]:
    result: dict[int, list[tuple[int, int]]] = defaultdict(list)
    rows = EmbeddingClusterAdjacency.objects.filter(
        Q(cluster_a_id__in=cluster_ids) | Q(cluster_b_id__in=cluster_ids)
    )
    for a, b, shared in rows.values_list("cluster_a_id", "cluster_b_id", "shared"):
        result[a].append((b, shared))
        result[b].append((a, shared))
    for pairs in result.values():
        pairs.sort(key=lambda pair: (-pair[1], pair[0]))
    return result
