"""What DREAM derives from the store, and the record of every DREAM run.

Cluster and graph tables are derived data: the script layer rebuilds them from the memories at any
time, so a rebuild replaces their rows (the memories they point at are never touched). DreamRun
rows are the owner's history of consolidation and are only ever appended or finished.
"""

from django.db import models
from django.utils import timezone


class TopicCluster(models.Model):
    """One surviving keyword (jieba noun/verb/adjective or English token) of one scope and that
    scope's narratives that use it; with the optional Jaccard merge, several keywords whose member
    sets overlap. Terms, counts and members come from that scope alone."""

    scope = models.ForeignKey("memory.Scope", on_delete=models.CASCADE, related_name="+")
    term = models.CharField(max_length=100)
    terms = models.JSONField(default=list, blank=True)
    size = models.PositiveIntegerField(default=0)
    built_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "term"], name="topic_cluster_scope_term")
        ]
        ordering = ["-size", "term"]

    def __str__(self) -> str:
        return f"{self.term} ({self.size})"


class TopicClusterMember(models.Model):
    cluster = models.ForeignKey(TopicCluster, on_delete=models.CASCADE, related_name="members")
    narrative = models.ForeignKey(
        "memory.Narrative", on_delete=models.CASCADE, related_name="topic_memberships"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "narrative"], name="topic_member_unique")
        ]

    def __str__(self) -> str:
        return f"narrative {self.narrative_id} in topic {self.cluster_id}"


class NarrativeKeywords(models.Model):
    """The topic words jieba found in one narrative, kept with a digest of the text they came from,
    so a rebuild only segments narratives that are new or whose text changed."""

    narrative = models.OneToOneField(
        "memory.Narrative", primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    digest = models.CharField(max_length=40)
    words = models.JSONField(default=list)

    class Meta:
        verbose_name_plural = "narrative keywords"

    def __str__(self) -> str:
        return f"narrative {self.narrative_id}: {' '.join(self.words[:8])}"


class EmbeddingCluster(models.Model):
    """One k-means centroid in embedding space, computed over one scope's narratives. Members are
    soft: each narrative sits in its three nearest centroids of its scope, so a memory between
    topics is visible from each of them. The name quotes only that scope's non-secret members."""

    scope = models.ForeignKey("memory.Scope", on_delete=models.CASCADE, related_name="+")
    index = models.PositiveIntegerField()
    name = models.CharField(max_length=300)
    size = models.PositiveIntegerField(default=0)
    centroid = models.BinaryField()
    embedding_model = models.CharField(max_length=120)
    built_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "index"], name="emb_cluster_scope_index")
        ]
        ordering = ["scope_id", "index"]

    def __str__(self) -> str:
        return f"#{self.index} {self.name}"


class EmbeddingClusterMember(models.Model):
    cluster = models.ForeignKey(EmbeddingCluster, on_delete=models.CASCADE, related_name="members")
    memory = models.ForeignKey(
        "memory.Memory", on_delete=models.CASCADE, related_name="embedding_memberships"
    )
    # 1 = the nearest centroid, up to 3.
    rank = models.PositiveSmallIntegerField()
    distance = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "memory"], name="emb_member_unique"),
            models.UniqueConstraint(fields=["memory", "rank"], name="emb_member_rank_unique"),
        ]

    def __str__(self) -> str:
        return f"memory {self.memory_id} in cluster {self.cluster_id} (rank {self.rank})"


class EmbeddingClusterAdjacency(models.Model):
    """How many narratives two clusters share (stored once per pair, low index first)."""

    cluster_a = models.ForeignKey(EmbeddingCluster, on_delete=models.CASCADE, related_name="+")
    cluster_b = models.ForeignKey(EmbeddingCluster, on_delete=models.CASCADE, related_name="+")
    shared = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster_a", "cluster_b"], name="emb_adjacency_unique")
        ]
        verbose_name_plural = "embedding cluster adjacency"

    def __str__(self) -> str:
        return f"clusters {self.cluster_a_id}–{self.cluster_b_id}: {self.shared} shared"


class EntityNode(models.Model):
    """An entity named in `entities_role`, per scope, with the roles it has played."""

    scope = models.ForeignKey("memory.Scope", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=120)
    profile = models.ForeignKey(
        "memory.Profile", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    mentions = models.PositiveIntegerField(default=0)
    # {"审查": 3, "执行": 1}
    roles = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "name"], name="entity_node_scope_name")
        ]
        ordering = ["-mentions", "name"]

    def __str__(self) -> str:
        return self.name


class EntityEdge(models.Model):
    """Two entities named in the same narrative (stored once per pair, names in sorted order)."""

    scope = models.ForeignKey("memory.Scope", on_delete=models.CASCADE, related_name="+")
    node_a = models.ForeignKey(EntityNode, on_delete=models.CASCADE, related_name="+")
    node_b = models.ForeignKey(EntityNode, on_delete=models.CASCADE, related_name="+")
    cooccurrence = models.PositiveIntegerField(default=0)
    # {"判断+执行|审查": 2}: node_a's roles | node_b's roles, with how often that pairing occurred.
    role_pairs = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node_a", "node_b"], name="entity_edge_pair_unique")
        ]
        ordering = ["-cooccurrence"]

    def __str__(self) -> str:
        return f"{self.node_a_id}–{self.node_b_id} ×{self.cooccurrence}"


class DreamLayer(models.TextChoices):
    SCAN = "scan", "layer 0 · scan"
    SCRIPT = "script", "script layer"
    SOLIDIFY = "solidify", "solidify (固化)"
    COMBING = "combing", "combing (梳理)"
    DRIFT = "drift", "night drift (夜游)"
    DREAM = "dream", "symbolic dream (象征梦)"
    ALL = "all", "full DREAM"


LLM_LAYERS = (DreamLayer.SOLIDIFY, DreamLayer.COMBING, DreamLayer.DRIFT, DreamLayer.DREAM)
LAYER_ORDER = (DreamLayer.SCAN, DreamLayer.SCRIPT, *LLM_LAYERS)


class DreamRunStatus(models.TextChoices):
    RUNNING = "running", "running"
    # Not started: another run held the lease. The error says who held it.
    SKIPPED = "skipped", "skipped (another run held the lease)"
    OK = "ok", "ok"
    # The deterministic layers ran; at least one LLM layer failed and wrote nothing.
    PARTIAL = "partial", "partial (an LLM layer failed)"
    FAILED = "failed", "failed"
    # Its holder died (or lost the lease) before finishing; the next run resumes what it left.
    INTERRUPTED = "interrupted", "interrupted"


class DreamRun(models.Model):
    """One DREAM trigger (a layer or the whole pipeline): what each layer did, tokens, errors."""

    layer = models.CharField(max_length=16, choices=DreamLayer.choices)
    day = models.DateField(db_index=True)
    status = models.CharField(
        max_length=16, choices=DreamRunStatus.choices, default=DreamRunStatus.RUNNING
    )
    trigger = models.CharField(max_length=16, default="manual")
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # {"layers": {"scan": {"status": "ok", ...}, "solidify": {"status": "ok", "written": {..}}},
    #  "order": ["scan", "script", ...]} — PostgreSQL's jsonb does not keep key order, "order" does.
    stats = models.JSONField(default=dict, blank=True)
    tokens = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        verbose_name = "DREAM run"

    def __str__(self) -> str:
        return f"DREAM {self.layer} {self.day} · {self.status}"


class DreamLease(models.Model):
    """A database lease: whoever holds the row is the one DREAM running, however many beat
    instances or manual triggers fire at once. The holder renews `expires_at` as it goes (a
    heartbeat); a holder whose heartbeat ran out, or whose process is gone from this host, is dead
    and its lease is taken over at once."""

    name = models.CharField(max_length=40, unique=True)
    holder = models.CharField(max_length=64, blank=True)
    host = models.CharField(max_length=255, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    # The holder process's start time as the kernel counts it, so a reused pid is not taken alive.
    process_started = models.CharField(max_length=40, blank=True)
    run_id = models.PositiveIntegerField(null=True, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        who = f"{self.host} pid {self.pid}" if self.pid else (self.holder or "nobody")
        return f"{self.name} held by {who} until {self.expires_at}"
