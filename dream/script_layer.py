"""The deterministic script layer (DESIGN §6): zero tokens, safe to run at any time, idempotent.

Everything is computed per scope: a cluster, its name, its counts and its neighbours come from one
scope's memories, so no derived row carries one project's text or numbers into another; names and
entity names are never made from secret memories.

- topic clusters: jieba POS keywords (nouns, verbs, adjectives) plus English tokens, filtered by
  document frequency (generic terms in > 20% of memories and rare ones in < 3 go), one cluster per
  surviving term; an optional Jaccard merge for large stores;
- soft clusters: k-means in embedding space, each narrative in its 3 nearest centroids, adjacency =
  narratives two clusters share, query routing = top 3 clusters + 1-hop neighbours;
- the entity graph from `entities_role` ("A=判断+执行; B=审查");
- recurrence refresh from the scope's current tag frequencies, then the write path's weight
  normalisation applied per scope;
- attention statistics (which clusters recall lights up, which are deserts).

Each rebuild is one transaction with one audit row, and writes nothing when the result equals what
is stored, so a second run changes nothing.
"""

import hashlib
import logging
import re
import threading
from collections import Counter, defaultdict
from functools import cache

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from dream.lease import lease_heartbeat
from dream.models import (
    EmbeddingCluster,
    EmbeddingClusterAdjacency,
    EmbeddingClusterMember,
    EntityEdge,
    EntityNode,
    NarrativeKeywords,
    TopicCluster,
    TopicClusterMember,
)
from dream.selectors import attention_heatmap_read
from memory.models import (
    Actor,
    AuditAction,
    EmbeddingStatus,
    MemoryStatus,
    Narrative,
    NarrativeTag,
    Profile,
)
from memory.services.audit import audit_record
from memory.services.embedding import vector_from_bytes, vectors_normalise
from memory.services.narratives import LIVE_STATUSES, narratives_normalise_inflation
from memory.services.weights import (
    NO_TAGS_RECURRENCE,
    recurrence_band,
    weight_compute,
)

logger = logging.getLogger("tideline.dream")

# jieba POS flags kept as topic words: nouns (n, nr, ns, nz, vn…), verbs (v, vd), adjectives (a, ad).
KEYWORD_POS_PREFIXES = ("n", "v", "a")
ENGLISH_STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "are",
        "but",
        "not",
        "you",
        "all",
        "any",
        "can",
        "had",
        "her",
        "was",
        "one",
        "our",
        "out",
        "has",
        "him",
        "his",
        "how",
        "its",
        "let",
        "may",
        "new",
        "now",
        "old",
        "see",
        "two",
        "who",
        "did",
        "get",
        "she",
        "too",
        "use",
        "that",
        "with",
        "have",
        "this",
        "will",
        "your",
        "from",
        "they",
        "been",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "would",
        "there",
        "their",
        "them",
        "then",
        "than",
        "into",
        "some",
        "could",
        "other",
        "about",
        "after",
        "also",
        "just",
        "like",
        "more",
        "most",
        "only",
        "over",
        "such",
        "very",
        "each",
        "because",
        "should",
        "being",
        "does",
    ]
)
_ENGLISH = re.compile(r"[a-z][a-z0-9'-]*[a-z0-9]")
_jieba_lock = threading.Lock()


@cache
def _posseg():
    """jieba's POS tagger, initialised once with Tideline's cache dir, never the system temp dir."""
    import jieba
    import jieba.posseg

    with _jieba_lock:
        jieba.setLogLevel(logging.WARNING)
        settings.JIEBA_CACHE_DIR.mkdir(parents=True, exist_ok=True)
        jieba.dt.tmp_dir = str(settings.JIEBA_CACHE_DIR)
        jieba.initialize()
    return jieba.posseg


def keywords_extract(text: str) -> set[str]:
    """Topic words of one memory: jieba nouns/verbs/adjectives of 2+ characters and English words
    of 3+ letters (lower-cased, minus function words)."""
    words: set[str] = set()
    for pair in _posseg().cut(text or ""):
        word, flag = pair.word.strip(), pair.flag
        if flag == "eng" or word.isascii():
            lowered = word.lower()
            if _ENGLISH.fullmatch(lowered) and lowered not in ENGLISH_STOPWORDS:
                words.add(lowered[:100])
        elif len(word) >= 2 and flag.startswith(KEYWORD_POS_PREFIXES):
            words.add(word[:100])
    return words


def _digest(text: str) -> str:
    return hashlib.sha1((text or "").encode(), usedforsecurity=False).hexdigest()


def keywords_for(rows: list[tuple[int, str]], *, store: bool = True) -> list[set[str]]:
    """Topic words of each (narrative id, text), segmenting only texts not seen before: jieba is
    most of a rebuild's time, and most narratives have not changed since the last one."""
    cached = {
        pk: (digest, words)
        for pk, digest, words in NarrativeKeywords.objects.values_list(
            "narrative_id", "digest", "words"
        )
    }
    documents, fresh, stale = [], [], []
    for pk, text in rows:
        digest = _digest(text)
        hit = cached.get(pk)
        if hit is not None and hit[0] == digest:
            documents.append(set(hit[1]))
            continue
        words = keywords_extract(text)
        documents.append(words)
        (stale if hit is not None else fresh).append((pk, digest, sorted(words)))
    if store and (fresh or stale):
        words_field = NarrativeKeywords._meta.get_field("words")
        with transaction.atomic():
            _rows_insert(
                NarrativeKeywords,
                ["narrative_id", "digest", "words"],
                (
                    (pk, digest, words_field.get_db_prep_save(words, connection))
                    for pk, digest, words in fresh
                ),
            )
            for pk, digest, words in stale:
                NarrativeKeywords.objects.filter(pk=pk).update(digest=digest, words=words)
    return documents


def terms_filter(
    documents: list[set[str]], *, min_df: int, max_ratio: float
) -> dict[str, list[int]]:
    """term → indexes of the documents using it, keeping terms in at least `min_df` documents and in
    no more than `max_ratio` of them."""
    postings: dict[str, list[int]] = defaultdict(list)
    for position, terms in enumerate(documents):
        for term in terms:
            postings[term].append(position)
    ceiling = max_ratio * len(documents)
    return {
        term: positions
        for term, positions in postings.items()
        if min_df <= len(positions) <= ceiling
    }


def clusters_jaccard_merge(clusters: dict[str, list[int]], *, threshold: float) -> list[list[str]]:
    """Groups of terms whose member sets overlap with Jaccard ≥ threshold (connected components)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    terms = sorted(clusters)
    if not terms:
        return []
    rows, cols = [], []
    for row, term in enumerate(terms):
        rows.extend([row] * len(clusters[term]))
        cols.extend(clusters[term])
    membership = csr_matrix(
        (np.ones(len(rows), dtype=np.float32), (rows, cols)),
        shape=(len(terms), max(cols) + 1),
    )
    intersection = (membership @ membership.T).tocoo()
    sizes = np.asarray(membership.sum(axis=1)).ravel()
    union = sizes[intersection.row] + sizes[intersection.col] - intersection.data
    keep = (intersection.data / union >= threshold) & (intersection.row != intersection.col)
    graph = csr_matrix(
        (np.ones(int(keep.sum())), (intersection.row[keep], intersection.col[keep])),
        shape=(len(terms), len(terms)),
    )
    count, labels = connected_components(graph, directed=False)
    groups: list[list[str]] = [[] for _ in range(count)]
    for term, label in zip(terms, labels, strict=True):
        groups[label].append(term)
    return groups


def _rows_insert(model, columns: list[str], rows) -> None:
    """Plain multi-row INSERTs for derived rows: at tens of thousands of memberships, building a
    model instance per row costs more than the clustering itself."""
    sql = (
        f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))})"
    )
    batch: list[tuple] = []
    with connection.cursor() as cursor:
        for row in rows:
            batch.append(row)
            if len(batch) == 5000:
                cursor.executemany(sql, batch)
                batch = []
        if batch:
            cursor.executemany(sql, batch)


def _live_narratives():
    return Narrative.objects.filter(status=MemoryStatus.ACTIVE).order_by("pk")


def _readable_narratives():
    """What derived text (topic terms, entity names) may be made from: never a secret memory."""
    return _live_narratives().filter(secret=False)


def _scope_topics(ids: list[int], documents: list[set[str]], *, merge: bool) -> dict[str, dict]:
    kept = terms_filter(
        documents,
        min_df=settings.TIDELINE_DREAM_TOPIC_MIN_DF,
        max_ratio=settings.TIDELINE_DREAM_TOPIC_MAX_RATIO,
    )
    if not merge:
        return {
            term: {"terms": [term], "members": sorted(ids[p] for p in positions)}
            for term, positions in kept.items()
        }
    result = {}
    for group in clusters_jaccard_merge(kept, threshold=settings.TIDELINE_DREAM_TOPIC_JACCARD):
        # The most used term names the merged cluster.
        group.sort(key=lambda term: (-len(kept[term]), term))
        members = sorted({ids[p] for term in group for p in kept[term]})
        result[group[0]] = {"terms": group, "members": members}
    return result


def topic_clusters_compute(
    *, merge: bool | None = None, store: bool = True
) -> dict[tuple[int, str], dict]:
    """{(scope id, cluster term): {"terms": [...], "members": sorted narrative ids}}: each scope's
    active non-secret narratives clustered on their own, so a term, its count and its members all
    come from that one scope (the document-frequency filter counts within the scope too)."""
    merge = settings.TIDELINE_DREAM_TOPIC_MERGE if merge is None else merge
    rows = list(_readable_narratives().values_list("pk", "scope_id", "search_text"))
    documents = keywords_for([(pk, text) for pk, _, text in rows], store=store)
    by_scope: dict[int, tuple[list[int], list[set[str]]]] = defaultdict(lambda: ([], []))
    for (pk, scope_id, _), words in zip(rows, documents, strict=True):
        by_scope[scope_id][0].append(pk)
        by_scope[scope_id][1].append(words)
    result: dict[tuple[int, str], dict] = {}
    for scope_id, (ids, scope_documents) in sorted(by_scope.items()):
        lease_heartbeat()
        for term, entry in _scope_topics(ids, scope_documents, merge=merge).items():
            result[(scope_id, term)] = entry
    return result


def topic_clusters_rebuild(*, dry_run: bool = False, merge: bool | None = None) -> dict:
    """Recompute every scope's topic clusters and store what changed (one transaction, one audit
    row)."""
    wanted = topic_clusters_compute(merge=merge, store=not dry_run)
    stored: dict[tuple[int, str], dict] = {}
    pk_of: dict[tuple[int, str], int] = {}
    for cluster in TopicCluster.objects.all():
        stored[(cluster.scope_id, cluster.term)] = {"terms": cluster.terms, "members": []}
        pk_of[(cluster.scope_id, cluster.term)] = cluster.pk
    for scope_id, term, narrative_id in TopicClusterMember.objects.order_by(
        "narrative_id"
    ).values_list("cluster__scope_id", "cluster__term", "narrative_id"):
        stored[(scope_id, term)]["members"].append(narrative_id)
    removed = sorted(set(stored) - set(wanted))
    changed = sorted(key for key in wanted if stored.get(key) != wanted[key])
    stats = {
        "scopes": len({scope_id for scope_id, _ in wanted}),
        "clusters": len(wanted),
        "members": sum(len(entry["members"]) for entry in wanted.values()),
        "added_or_changed": len(changed),
        "removed": len(removed),
    }
    if dry_run or not (removed or changed):
        return stats
    now = timezone.now()
    with transaction.atomic():
        # Derived rows, rebuilt from the memories at will: replacing them loses nothing.
        TopicCluster.objects.filter(
            pk__in=[pk_of[key] for key in removed + changed if key in pk_of]
        ).delete()
        created = TopicCluster.objects.bulk_create(
            [
                TopicCluster(
                    scope_id=scope_id,
                    term=term,
                    terms=wanted[(scope_id, term)]["terms"],
                    size=len(wanted[(scope_id, term)]["members"]),
                    built_at=now,
                )
                for scope_id, term in changed
            ]
        )
        if created and created[0].pk is None:
            fresh = {(c.scope_id, c.term): c for c in TopicCluster.objects.filter(built_at=now)}
            created = [fresh[key] for key in changed]
        _rows_insert(
            TopicClusterMember,
            ["cluster_id", "narrative_id"],
            (
                (cluster.pk, narrative_id)
                for cluster in created
                for narrative_id in wanted[(cluster.scope_id, cluster.term)]["members"]
            ),
        )
        audit_record(
            actor=Actor.SYSTEM,
            action=AuditAction.UPDATE,
            target_type="topiccluster",
            reason=f"topic clusters rebuilt: {len(changed)} added or changed, {len(removed)} removed",
            after={
                "changed": [f"{scope_id}:{term}" for scope_id, term in changed[:500]],
                "removed": [f"{scope_id}:{term}" for scope_id, term in removed[:500]],
                **stats,
            },
        )
    return stats


def soft_k(count: int) -> int:
    """k = max(5, int(sqrt(N) × 1.5)), never more than N."""
    return min(count, max(5, int(np.sqrt(count) * 1.5)))


def soft_assign(
    vectors: np.ndarray, *, fit: np.ndarray | None = None, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k-means over L2-normalised vectors, fitted on the rows `fit` selects (all by default) and
    every row assigned. Returns (centroids k×d, nearest centroid indexes N×m, distances N×m) with
    m = min(3, k), nearest first."""
    from sklearn.cluster import KMeans, MiniBatchKMeans
    from threadpoolctl import threadpool_limits

    count = len(vectors)
    fitted = vectors if fit is None else vectors[fit]
    k = soft_k(len(fitted))
    # Full Lloyd iterations stay cheap up to a few thousand vectors; past that mini-batches, seeded
    # by k-means++ over a small sample, keep a rebuild of tens of thousands of memories in seconds.
    # The choice counts the vectors fitted, as k does: counting the secrets placed afterwards let
    # one secret write switch the algorithm and reshape every cluster an agent reads.
    if len(fitted) <= settings.TIDELINE_DREAM_KMEANS_FULL_MAX:
        model = KMeans(n_clusters=k, n_init=1, random_state=seed, max_iter=100)
    else:
        model = MiniBatchKMeans(
            n_clusters=k,
            n_init=1,
            random_state=seed,
            batch_size=4096,
            max_iter=20,
            init_size=min(len(fitted), 3 * k),
        )
    # Measured on the 2-core box: OpenMP and two BLAS pools fighting over the cores made 10k
    # vectors take 46 s instead of 7; a bounded pool keeps DREAM from starving the query path too.
    with threadpool_limits(limits=settings.TIDELINE_DREAM_THREADS):
        model.fit(fitted)
        centroids = model.cluster_centers_.astype(np.float32)
        squared = (
            (vectors**2).sum(axis=1)[:, None]
            - 2 * vectors @ centroids.T
            + (centroids**2).sum(axis=1)[None, :]
        )
    distances = np.sqrt(np.maximum(squared, 0))
    m = min(3, k)
    nearest = (
        np.argpartition(distances, m - 1, axis=1)[:, :m]
        if m < k
        else np.tile(np.arange(k), (count, 1))
    )
    picked = np.take_along_axis(distances, nearest, axis=1)
    order = np.argsort(picked, axis=1, kind="stable")
    return (
        centroids,
        np.take_along_axis(nearest, order, axis=1),
        np.take_along_axis(picked, order, axis=1),
    )


def _embedded_narratives() -> tuple[dict[int, tuple[list[int], np.ndarray, np.ndarray]], str]:
    """Per scope, the ids, vectors and secret flags of its active embedded narratives, all from
    the store's most used embedding model (vectors of two models never share a space)."""
    ready = _live_narratives().filter(embedding_status=EmbeddingStatus.READY)
    models = Counter(ready.values_list("embedding_model", flat=True))
    if not models:
        return {}, ""
    model_id = models.most_common(1)[0][0]
    grouped: dict[int, tuple[list[int], list[np.ndarray], list[bool]]] = defaultdict(
        lambda: ([], [], [])
    )
    for pk, scope_id, blob, secret in ready.filter(embedding_model=model_id).values_list(
        "pk", "scope_id", "embedding", "secret"
    ):
        if blob:
            grouped[scope_id][0].append(pk)
            grouped[scope_id][1].append(vector_from_bytes(bytes(blob)))
            grouped[scope_id][2].append(secret)
    return {
        scope_id: (ids, vectors_normalise(np.vstack(vectors)), np.asarray(secrets, dtype=bool))
        for scope_id, (ids, vectors, secrets) in grouped.items()
    }, model_id


def _cluster_names(ids: list[int], nearest: np.ndarray, k: int) -> list[str]:
    """Each cluster is named after its two highest-weight non-secret nearest members; `ids` are
    one scope's narratives, so a name never quotes another scope."""
    weights = dict(_readable_narratives().filter(pk__in=ids).values_list("pk", "weight"))
    best: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for position, pk in enumerate(ids):
        if pk in weights:
            best[int(nearest[position, 0])].append((-weights[pk], pk))
    top = {index: [pk for _, pk in sorted(pairs)[:2]] for index, pairs in best.items()}
    wanted = {pk for pks in top.values() for pk in pks}
    gestures = dict(Narrative.objects.filter(pk__in=wanted).values_list("pk", "gesture"))
    names = []
    for index in range(k):
        parts = [gestures[pk][:60] for pk in top.get(index, [])]
        names.append(" / ".join(parts)[:300] or f"cluster {index}")
    return names


def _soft_scope_plan(ids: list[int], vectors: np.ndarray, secret: np.ndarray) -> dict:
    # The clusters are fitted on what an agent may see and every narrative is then placed in
    # them: secrets fitted too would move k, the centroids and so the clusters an agent reads.
    shown = ~secret
    centroids, nearest, distances = soft_assign(vectors, fit=shown if shown.any() else None)
    pairs: Counter = Counter()
    for row in nearest:
        members = sorted(int(index) for index in row)
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                pairs[(a, b)] += 1
    return {
        "ids": ids,
        "centroids": centroids,
        "nearest": nearest,
        "distances": distances,
        "pairs": pairs,
        "memberships": {
            (ids[row], int(nearest[row, rank]))
            for row in range(len(ids))
            for rank in range(nearest.shape[1])
        },
    }


def _soft_scope_store(scope_id: int, plan: dict, *, model_id: str, now) -> None:
    ids, centroids, nearest = plan["ids"], plan["centroids"], plan["nearest"]
    distances, k = plan["distances"], len(plan["centroids"])
    names = _cluster_names(ids, nearest, k)
    sizes = Counter(int(index) for index in nearest.ravel())
    # A cluster keeps its row (and id) from one rebuild to the next, updated in place: new ids
    # after every rebuild would tell an agent that memberships moved, secret ones included.
    kept = EmbeddingCluster.objects.filter(scope_id=scope_id)
    EmbeddingClusterMember.objects.filter(cluster__in=kept).delete()
    EmbeddingClusterAdjacency.objects.filter(cluster_a__in=kept).delete()
    kept.filter(index__gte=k).delete()
    for index in range(k):
        EmbeddingCluster.objects.update_or_create(
            scope_id=scope_id,
            index=index,
            defaults={
                "name": names[index],
                "size": sizes.get(index, 0),
                "centroid": centroids[index].tobytes(),
                "embedding_model": model_id,
                "built_at": now,
            },
        )
    pk_of = dict(kept.values_list("index", "pk"))
    _rows_insert(
        EmbeddingClusterMember,
        ["cluster_id", "memory_id", "rank", "distance"],
        (
            (pk_of[int(nearest[row, rank])], ids[row], rank + 1, float(distances[row, rank]))
            for row in range(len(ids))
            for rank in range(nearest.shape[1])
        ),
    )
    EmbeddingClusterAdjacency.objects.bulk_create(
        [
            EmbeddingClusterAdjacency(cluster_a_id=pk_of[a], cluster_b_id=pk_of[b], shared=n)
            for (a, b), n in sorted(plan["pairs"].items())
        ],
        batch_size=2000,
    )


def soft_clusters_rebuild(*, dry_run: bool = False) -> dict:
    """k-means soft clusters over each scope's embedded narratives, with adjacency inside the
    scope (one transaction, one audit row; a scope whose membership is unchanged is left as is)."""
    by_scope, model_id = _embedded_narratives()
    stored: dict[int, set[tuple[int, int]]] = defaultdict(set)
    for scope_id, memory_id, index in EmbeddingClusterMember.objects.values_list(
        "cluster__scope_id", "memory_id", "cluster__index"
    ):
        stored[scope_id].add((memory_id, index))
    stored_k = Counter(EmbeddingCluster.objects.values_list("scope_id", flat=True))
    plans, changed = {}, []
    for scope_id, (ids, vectors, secret) in sorted(by_scope.items()):
        lease_heartbeat()
        plan = _soft_scope_plan(ids, vectors, secret)
        plans[scope_id] = plan
        if plan["memberships"] != stored.get(scope_id, set()) or stored_k.get(scope_id) != len(
            plan["centroids"]
        ):
            changed.append(scope_id)
    gone = sorted(set(stored_k) - set(by_scope))
    stats = {
        "scopes": len(plans),
        "narratives": sum(len(plan["ids"]) for plan in plans.values()),
        "clusters": sum(len(plan["centroids"]) for plan in plans.values()),
        "memberships": sum(int(plan["nearest"].size) for plan in plans.values()),
        "adjacent_pairs": sum(len(plan["pairs"]) for plan in plans.values()),
        "changed": bool(changed or gone),
        "scopes_rebuilt": len(changed),
    }
    if dry_run or not (changed or gone):
        return stats
    now = timezone.now()
    with transaction.atomic():
        EmbeddingCluster.objects.filter(scope_id__in=gone).delete()
        for scope_id in changed:
            _soft_scope_store(scope_id, plans[scope_id], model_id=model_id, now=now)
        audit_record(
            actor=Actor.SYSTEM,
            action=AuditAction.UPDATE,
            target_type="embeddingcluster",
            reason=(
                f"soft clusters rebuilt in {len(changed)} scope(s), cleared in {len(gone)}: "
                f"{stats['clusters']} clusters over {stats['narratives']} narratives"
            ),
            after=stats | {"rebuilt": changed, "cleared": gone},
        )
    return stats


_ENTITY_SPLIT = re.compile(r"[;；\n]+")
_ROLE_SPLIT = re.compile(r"[+＋、,，/]+")


def entities_role_parse(text: str) -> list[tuple[str, list[str]]]:
    """ "A=判断+执行; B=审查" → [("A", ["判断", "执行"]), ("B", ["审查"])]. An entity named twice keeps
    its first roles; a part without "=" is an entity with no stated role."""
    entities: dict[str, list[str]] = {}
    for part in _ENTITY_SPLIT.split(text or ""):
        name, _, roles = part.replace("＝", "=").partition("=")
        name = name.strip()[:120]
        if not name or name in entities:
            continue
        entities[name] = [role.strip() for role in _ROLE_SPLIT.split(roles) if role.strip()]
    return list(entities.items())


def entity_graph_compute() -> tuple[dict, dict]:
    """({(scope, name): {"mentions", "roles"}}, {(scope, a, b): {"cooccurrence", "role_pairs"}})."""
    nodes: dict[tuple[int, str], dict] = {}
    edges: dict[tuple[int, str, str], dict] = {}
    rows = _readable_narratives().exclude(entities_role="").values_list("scope_id", "entities_role")
    for scope_id, text in rows:
        parsed = sorted(entities_role_parse(text))
        for name, roles in parsed:
            node = nodes.setdefault((scope_id, name), {"mentions": 0, "roles": {}})
            node["mentions"] += 1
            for role in roles:
                node["roles"][role] = node["roles"].get(role, 0) + 1
        for i, (name_a, roles_a) in enumerate(parsed):
            for name_b, roles_b in parsed[i + 1 :]:
                edge = edges.setdefault(
                    (scope_id, name_a, name_b), {"cooccurrence": 0, "role_pairs": {}}
                )
                edge["cooccurrence"] += 1
                pair = f"{'+'.join(roles_a)}|{'+'.join(roles_b)}"
                edge["role_pairs"][pair] = edge["role_pairs"].get(pair, 0) + 1
    return nodes, edges


def _profiles_by_name(scope_ids: set[int]) -> dict[tuple[int, str], int]:
    """(scope, lower-cased name or alias) → profile id, so graph nodes point at their profiles."""
    found = {}
    for pk, scope_id, name, aliases in Profile.objects.filter(scope_id__in=scope_ids).values_list(
        "pk", "scope_id", "name", "aliases"
    ):
        for label in [name, *(aliases or [])]:
            found.setdefault((scope_id, str(label).strip().lower()), pk)
    return found


def entity_graph_rebuild(*, dry_run: bool = False) -> dict:
    nodes, edges = entity_graph_compute()
    stored_nodes = {
        (n.scope_id, n.name): {"mentions": n.mentions, "roles": n.roles}
        for n in EntityNode.objects.all()
    }
    stored_edges = {
        (e.scope_id, e.node_a.name, e.node_b.name): {
            "cooccurrence": e.cooccurrence,
            "role_pairs": e.role_pairs,
        }
        for e in EntityEdge.objects.select_related("node_a", "node_b")
    }
    stats = {"nodes": len(nodes), "edges": len(edges)}
    stats["changed"] = stored_nodes != nodes or stored_edges != edges
    if dry_run or not stats["changed"]:
        return stats
    from memory.services.scopes import scope_global

    global_id = scope_global().pk
    profiles = _profiles_by_name({scope for scope, _ in nodes} | {global_id})
    with transaction.atomic():
        EntityNode.objects.all().delete()
        created = EntityNode.objects.bulk_create(
            [
                EntityNode(
                    scope_id=scope_id,
                    name=name,
                    mentions=data["mentions"],
                    roles=data["roles"],
                    profile_id=profiles.get((scope_id, name.lower()))
                    or profiles.get((global_id, name.lower())),
                )
                for (scope_id, name), data in sorted(nodes.items())
            ]
        )
        if created and created[0].pk is None:
            created = list(EntityNode.objects.all())
        pk_of = {(node.scope_id, node.name): node.pk for node in created}
        EntityEdge.objects.bulk_create(
            [
                EntityEdge(
                    scope_id=scope_id,
                    node_a_id=pk_of[(scope_id, a)],
                    node_b_id=pk_of[(scope_id, b)],
                    cooccurrence=data["cooccurrence"],
                    role_pairs=data["role_pairs"],
                )
                for (scope_id, a, b), data in sorted(edges.items())
            ]
        )
        audit_record(
            actor=Actor.SYSTEM,
            action=AuditAction.UPDATE,
            target_type="entitynode",
            reason=f"entity graph rebuilt: {len(nodes)} entities, {len(edges)} pairs",
            after=stats,
        )
    return stats


def recurrence_compute() -> dict[int, int]:
    """Narrative id → recurrence band from current tag frequencies within its own scope, with the
    write path's bands (number of other live narratives of the scope sharing at least one tag; no
    tags → 3): another project's tags never raise this one's weights, and a narrative an agent may
    see counts only the sharers an agent may see (memory/services/narratives.py)."""
    live = Narrative.objects.filter(status__in=LIVE_STATUSES)
    scope_of = dict(live.values_list("pk", "scope_id"))
    secret = set(live.filter(secret=True).values_list("pk", flat=True))
    tags_of: dict[int, list[str]] = defaultdict(list)
    holders: dict[tuple[int, str], set[int]] = defaultdict(set)
    shown_holders: dict[tuple[int, str], set[int]] = defaultdict(set)
    for narrative_id, tag in NarrativeTag.objects.filter(
        narrative__status__in=LIVE_STATUSES
    ).values_list("narrative_id", "tag"):
        tags_of[narrative_id].append(tag)
        holders[(scope_of[narrative_id], tag)].add(narrative_id)
        if narrative_id not in secret:
            shown_holders[(scope_of[narrative_id], tag)].add(narrative_id)
    saturated = recurrence_band(10**6)
    result = {}
    for narrative_id, scope_id in scope_of.items():
        tags = tags_of.get(narrative_id)
        if not tags:
            result[narrative_id] = NO_TAGS_RECURRENCE
            continue
        counted = holders if narrative_id in secret else shown_holders
        groups = [counted[(scope_id, tag)] for tag in tags]
        # Past 11 sharers the band is at its top: no need to build the whole union.
        if max(len(group) for group in groups) > 11:
            result[narrative_id] = saturated
            continue
        sharing = set().union(*groups)
        sharing.discard(narrative_id)
        result[narrative_id] = recurrence_band(len(sharing))
    return result


def weights_normalise_per_scope() -> dict[int, float]:
    """The write path's anti-inflation rule applied to each scope's newest weighted narratives.
    {narrative id: new weight}."""
    changed: dict[int, float] = {}
    live = Narrative.objects.filter(status__in=LIVE_STATUSES, weighted=True)
    for scope_id in sorted(set(live.values_list("scope_id", flat=True))):
        changed.update(narratives_normalise_inflation(scope_id=scope_id))
    return changed


def recurrence_refresh(*, dry_run: bool = False) -> dict:
    """Re-band recurrence from each scope's current tag frequencies, re-weigh what moved, then
    apply the anti-inflation normalisation per scope (one transaction, one audit row)."""
    wanted = recurrence_compute()
    current = {
        pk: (recurrence, weight, importance, emotional, unresolved, weighted)
        for pk, recurrence, weight, importance, emotional, unresolved, weighted in (
            Narrative.objects.filter(status__in=LIVE_STATUSES).values_list(
                "pk", "recurrence", "weight", "importance", "emotional", "unresolved", "weighted"
            )
        )
    }
    moved = {pk: band for pk, band in wanted.items() if current[pk][0] != band}
    stats = {"narratives": len(wanted), "recurrence_changed": len(moved)}
    if dry_run:
        return stats
    now = timezone.now()
    recurrence_log, weight_log = {}, {}
    groups: dict[tuple[int, float], list[int]] = defaultdict(list)
    for pk, band in moved.items():
        old_band, old_weight, importance, emotional, unresolved, weighted = current[pk]
        weight = (
            weight_compute(
                importance=importance, emotional=emotional, recurrence=band, unresolved=unresolved
            )
            if weighted
            else old_weight
        )
        groups[(band, weight)].append(pk)
        recurrence_log[pk] = [old_band, band]
        if weight != old_weight:
            weight_log[pk] = [old_weight, weight]
    with transaction.atomic():
        # One UPDATE per distinct (band, weight): a handful of statements for thousands of rows,
        # where a per-row CASE expression spends seconds in the ORM.
        for (band, weight), ids in groups.items():
            for start in range(0, len(ids), 5000):
                Narrative.objects.filter(pk__in=ids[start : start + 5000]).update(
                    recurrence=band, weight=weight, updated_at=now
                )
        normalised = weights_normalise_per_scope()
        stats["weights_normalised"] = len(normalised)
        if moved or normalised:
            audit_record(
                actor=Actor.SYSTEM,
                action=AuditAction.UPDATE,
                target_type="narrative",
                reason=(
                    f"recurrence refreshed from current tag frequencies: {len(moved)} re-banded, "
                    f"{len(normalised)} weights normalised"
                ),
                after={
                    "recurrence": recurrence_log,
                    "weight": weight_log,
                    "normalised": normalised,
                },
            )
    return stats


def attention_stats(*, days: int = 30) -> dict:
    heatmap = attention_heatmap_read(days=days)
    hottest = sorted(heatmap["clusters"], key=lambda row: (-row["heat"], row["index"]))[:5]
    return {
        "days": days,
        "recalls": heatmap["events"],
        "clusters": len(heatmap["clusters"]),
        "lit": len(heatmap["lit"]),
        "deserts": len(heatmap["deserts"]),
        "hottest": [{"id": row["id"], "heat": row["heat"]} for row in hottest if row["heat"]],
    }


def script_layer_run(*, dry_run: bool = False) -> dict:
    """Every deterministic step in order. Recurrence first, so cluster names see fresh weights."""
    return {
        "recurrence": recurrence_refresh(dry_run=dry_run),
        "topics": topic_clusters_rebuild(dry_run=dry_run),
        "soft_clusters": soft_clusters_rebuild(dry_run=dry_run),
        "entity_graph": entity_graph_rebuild(dry_run=dry_run),
        "attention": attention_stats(),
    }
