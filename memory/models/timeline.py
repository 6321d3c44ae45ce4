"""The raw past and what hangs off it: sessions, the unsummarised timeline, evidence, inbox,
snapshots, threads and attention."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from memory.models.memories import EmbeddingStatus


class SessionOrigin(models.TextChoices):
    USER = "user", "user"
    SUBAGENT = "subagent", "subagent"


class Session(models.Model):
    external_id = models.CharField(max_length=200)
    runtime = models.CharField(max_length=60, default="generic")
    cwd = models.CharField(max_length=1024, blank=True)
    scope = models.ForeignKey("memory.Scope", on_delete=models.PROTECT, related_name="sessions")
    origin = models.CharField(
        max_length=16, choices=SessionOrigin.choices, default=SessionOrigin.USER
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    delegation_depth = models.PositiveSmallIntegerField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    meta = models.JSONField(default=dict, blank=True)
    # The API key that opened it (None: the owner, a command, a keyless local agent). A session id
    # is the runtime's, so two keys can hold one each in two scopes; whose part is whose decides
    # which parts' turns count as this key's re-sends. An id, as in the audit log: it outlives
    # the key.
    key_id = models.BigIntegerField(null=True, blank=True, editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["runtime", "external_id"], name="session_runtime_external_unique"
            )
        ]
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"{self.runtime}:{self.external_id}"

    @property
    def is_subagent(self) -> bool:
        return self.origin == SessionOrigin.SUBAGENT or self.delegation_depth >= 1


class ContextTurn(models.Model):
    """One raw utterance of the timeline. Never summarised, never dropped."""

    session = models.ForeignKey(Session, on_delete=models.PROTECT, related_name="turns")
    # Denormalised from the session so scope-filtered search needs no join.
    scope = models.ForeignKey("memory.Scope", on_delete=models.PROTECT, related_name="turns")
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=20)
    speaker = models.CharField(max_length=120, blank=True)
    content = models.TextField()
    occurred_at = models.DateTimeField(default=timezone.now, db_index=True)
    recorded_at = models.DateTimeField(default=timezone.now)
    meta = models.JSONField(default=dict, blank=True)
    # The runtime's own id for the turn, so a re-sent transcript never stores a turn twice.
    external_id = models.CharField(max_length=200, null=True, blank=True)
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    embedding_model = models.CharField(max_length=120, blank=True, editable=False)
    embedding_status = models.CharField(
        max_length=16, choices=EmbeddingStatus.choices, default=EmbeddingStatus.PENDING
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="turn_session_seq_unique"),
            models.UniqueConstraint(
                fields=["session", "external_id"],
                condition=models.Q(external_id__isnull=False),
                name="turn_session_external_unique",
            ),
        ]
        indexes = [models.Index(fields=["scope", "occurred_at"], name="turn_scope_time")]
        ordering = ["session", "seq"]

    def __str__(self) -> str:
        return f"{self.speaker or self.role}: {self.content[:80]}"


class Evidence(models.Model):
    """The way back from a memory to the raw turns it came from."""

    memory = models.ForeignKey("memory.Memory", on_delete=models.PROTECT, related_name="evidence")
    turn = models.ForeignKey(ContextTurn, on_delete=models.PROTECT, related_name="evidence")
    quote = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["memory", "turn"], name="evidence_memory_turn_unique")
        ]
        verbose_name_plural = "evidence"

    def __str__(self) -> str:
        return f"memory {self.memory_id} ← turn {self.turn_id}"


class InboxStatus(models.TextChoices):
    PENDING = "pending", "pending"
    PROCESSED = "processed", "processed"
    SKIPPED = "skipped", "skipped"


class InboxItem(models.Model):
    """A captured raw utterance waiting for `flush_inbox`, processed exactly once."""

    session = models.ForeignKey(
        Session, null=True, blank=True, on_delete=models.PROTECT, related_name="inbox_items"
    )
    scope = models.ForeignKey(
        "memory.Scope", null=True, blank=True, on_delete=models.PROTECT, related_name="inbox_items"
    )
    # The recorded turn this utterance is (captured once: a unique link), and the evidence every
    # memory extracted from it points at.
    turn = models.OneToOneField(
        ContextTurn, null=True, blank=True, on_delete=models.PROTECT, related_name="inbox_item"
    )
    cwd = models.CharField(max_length=1024, blank=True)
    content = models.TextField()
    origin = models.CharField(
        max_length=16, choices=SessionOrigin.choices, default=SessionOrigin.USER
    )
    delegation_depth = models.PositiveSmallIntegerField(default=0)
    captured_at = models.DateTimeField(default=timezone.now)
    status = models.CharField(
        max_length=16, choices=InboxStatus.choices, default=InboxStatus.PENDING, db_index=True
    )
    processed_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["captured_at", "id"]

    def __str__(self) -> str:
        return self.content[:80]


class Snapshot(models.Model):
    """A short picture of where things stand, written at the end of a session or by DREAM."""

    scope = models.ForeignKey("memory.Scope", on_delete=models.PROTECT, related_name="snapshots")
    session = models.ForeignKey(
        Session, null=True, blank=True, on_delete=models.PROTECT, related_name="snapshots"
    )
    content = models.TextField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.content[:80]


class ThreadStatus(models.TextChoices):
    OPEN = "open", "open"
    EXPLORED = "explored", "explored"
    ABANDONED = "abandoned", "abandoned"


class Thread(models.Model):
    """A direction of thought DREAM (or the agent) wants to come back to."""

    scope = models.ForeignKey("memory.Scope", on_delete=models.PROTECT, related_name="threads")
    content = models.TextField()
    importance = models.PositiveSmallIntegerField(
        default=3, validators=[MinValueValidator(1), MaxValueValidator(5)]
    )
    emotional = models.PositiveSmallIntegerField(
        default=3, validators=[MinValueValidator(1), MaxValueValidator(5)]
    )
    recurrence = models.PositiveSmallIntegerField(
        default=3, validators=[MinValueValidator(1), MaxValueValidator(5)]
    )
    unresolved = models.PositiveSmallIntegerField(
        default=3, validators=[MinValueValidator(1), MaxValueValidator(5)]
    )
    weight = models.FloatField(default=0.6)
    status = models.CharField(
        max_length=16, choices=ThreadStatus.choices, default=ThreadStatus.OPEN
    )
    source_memory = models.ForeignKey(
        "memory.Memory", null=True, blank=True, on_delete=models.PROTECT, related_name="threads"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-weight", "-created_at"]

    def __str__(self) -> str:
        return self.content[:80]


class AttentionEvent(models.Model):
    """One recall of a memory: which memory, how similar, through which path, when."""

    memory = models.ForeignKey("memory.Memory", on_delete=models.PROTECT, related_name="attention")
    session = models.ForeignKey(
        Session, null=True, blank=True, on_delete=models.PROTECT, related_name="attention"
    )
    # t0_inject, t1_prefetch, t2_prefetch, t4_keyword, mcp_search, rest_search, ...
    source = models.CharField(max_length=32)
    similarity = models.FloatField(null=True, blank=True)
    occurred_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-occurred_at"]

    def __str__(self) -> str:
        return f"{self.source} → memory {self.memory_id}"
