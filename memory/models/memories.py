"""Memories: one concrete parent row carrying the lifecycle, one child row per kind.

A concrete `Memory` parent (multi-table inheritance) lets search, lifecycle maintenance, activation
and the owner's actions work on every kind of memory with one query, while each kind keeps its own
typed fields.
"""

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

PREDICATE_PATTERN = r"^[a-z][a-z0-9_]{1,40}$"
FACT_VALUE_MAX_CHARS = 60


class MemoryType(models.TextChoices):
    NARRATIVE = "narrative", "narrative"
    FACT = "fact", "fact"
    SELF_CONCEPT = "self_concept", "self-concept"


class MemoryStatus(models.TextChoices):
    CANDIDATE = "candidate", "candidate"
    ACTIVE = "active", "active"
    SUPERSEDED = "superseded", "superseded"
    EXPIRED = "expired", "expired"
    REJECTED = "rejected", "rejected"


class ExpiredBy(models.TextChoices):
    SUPERSEDED = "superseded", "superseded"
    SCOPE_GONE = "scope-gone", "scope gone"
    TTL = "ttl", "TTL"
    DECAY = "decay", "decay"
    MANUAL = "manual", "manual (owner)"


class EmbeddingStatus(models.TextChoices):
    PENDING = "pending", "needs embedding"
    READY = "ready", "embedded"
    FAILED = "failed", "embedding failed (back-fill pending)"
    DISABLED = "disabled", "no embedder configured"


def fact_stable_key(*, scope_id: int, profile_id: int, predicate: str) -> str:
    return f"fact:{scope_id}:{profile_id}:{predicate}"


def self_concept_stable_key(*, field: str) -> str:
    return f"self_concept:{field}"


def one_to_five() -> list:
    return [MinValueValidator(1), MaxValueValidator(5)]


class Memory(models.Model):
    memory_type = models.CharField(max_length=16, choices=MemoryType.choices, editable=False)
    scope = models.ForeignKey("memory.Scope", on_delete=models.PROTECT, related_name="memories")
    status = models.CharField(
        max_length=16, choices=MemoryStatus.choices, default=MemoryStatus.ACTIVE, db_index=True
    )
    confidence = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    importance = models.PositiveSmallIntegerField(default=3, validators=one_to_five())
    # Event time: when the fact was true in the world.
    valid_from = models.DateTimeField(default=timezone.now)
    valid_to = models.DateTimeField(null=True, blank=True)
    # Transaction time: when Tideline learned it.
    recorded_at = models.DateTimeField(default=timezone.now, db_index=True)
    supersedes = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    expired_by = models.CharField(max_length=16, choices=ExpiredBy.choices, blank=True)
    # Conditions the memory needs to stay true, e.g. "path:/abs/dir" or "memory:<id>".
    depends_on = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    pinned = models.BooleanField(default=False)
    # Nothing in a secret memory is ever sent to an LLM.
    secret = models.BooleanField(default=False)
    last_activated = models.DateTimeField(null=True, blank=True)
    activation_count = models.PositiveIntegerField(default=0)
    # One human sentence for the owner: "[偏好] 用户希望回复用简体中文".
    summary = models.CharField(max_length=500)
    # The text search and embedding see; composed by each kind from its own fields.
    search_text = models.TextField(blank=True)
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    embedding_model = models.CharField(max_length=120, blank=True, editable=False)
    embedding_status = models.CharField(
        max_length=16, choices=EmbeddingStatus.choices, default=EmbeddingStatus.PENDING
    )
    updated_at = models.DateTimeField(auto_now=True, db_index=True)
    # The key under which at most one row may be current ("fact:<scope>:<profile>:<predicate>",
    # "self_concept:<field>"); empty for kinds that have none. It lives on the parent because the
    # status does, so one partial unique index can hold the invariant on every database.
    stable_key = models.CharField(max_length=200, null=True, blank=True, editable=False)

    class Meta:
        verbose_name_plural = "memories"
        indexes = [
            models.Index(fields=["scope", "status"], name="memory_scope_status"),
            models.Index(fields=["memory_type", "status"], name="memory_type_status"),
            # The near-duplicate window (services/consolidation.py: merge_window), newest first.
            models.Index(
                fields=["scope", "memory_type", "-recorded_at", "-id"],
                name="memory_scope_type_recent",
            ),
            # The few secret memories of a scope set, which PostgreSQL's native search takes out
            # of the BM25 statistics of a caller who may not see them (memory/search/postgres.py).
            models.Index(
                fields=["scope"], condition=models.Q(secret=True), name="memory_secret_scope"
            ),
            # The few pinned memories of a scope set, which session start shows first (T2): without
            # it, finding them read every live row of the scopes (30–40 ms per 100k on SQLite).
            models.Index(
                fields=["scope", "status"],
                condition=models.Q(pinned=True),
                name="memory_pinned_scope",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["stable_key"],
                condition=models.Q(status="active"),
                name="memory_one_active_per_key",
            ),
            # An edit chain never forks: a row has at most one live successor.
            models.UniqueConstraint(
                fields=["supersedes"],
                condition=models.Q(status__in=["active", "candidate"]),
                name="memory_one_live_successor",
            ),
            # A memory is never valid for a negative time: whatever ends it ends it no earlier
            # than it began. The services keep this; the database refuses a stray write that
            # would not (a read of the past would find neither the row nor its successor).
            models.CheckConstraint(
                condition=models.Q(valid_to__isnull=True)
                | models.Q(valid_to__gte=models.F("valid_from")),
                name="memory_valid_interval",
            ),
        ]
        ordering = ["-recorded_at"]

    def __str__(self) -> str:
        return self.summary

    def save(self, *args, **kwargs) -> None:
        self.search_text = self.compose_search_text()
        self.stable_key = self.compose_stable_key()
        super().save(*args, **kwargs)

    def compose_search_text(self) -> str:
        return self.summary

    def compose_stable_key(self) -> str | None:
        return self.stable_key

    @property
    def is_current(self) -> bool:
        return self.status == MemoryStatus.ACTIVE and (
            self.valid_to is None or self.valid_to > timezone.now()
        )

    @property
    def child(self) -> "Memory":
        """The typed row (Narrative, Fact, SelfConcept) behind this parent row."""
        if type(self) is not Memory:
            return self
        return getattr(self, self.memory_type.replace("_", ""))


class NarrativeLayer(models.TextChoices):
    FACT = "fact", "fact"
    EXPERIENCE = "experience", "experience"
    DECISION = "decision", "decision"


class Narrative(Memory):
    """Tideline's structured memory: what happened, its backdrop, the verbatim moment, where it led."""

    gesture = models.CharField(max_length=500)
    context = models.TextField(blank=True)
    moment = models.TextField(blank=True)
    cognition_direction = models.CharField(max_length=500, blank=True)
    emotional = models.PositiveSmallIntegerField(default=3, validators=one_to_five())
    recurrence = models.PositiveSmallIntegerField(default=3, validators=one_to_five())
    unresolved = models.PositiveSmallIntegerField(default=3, validators=one_to_five())
    weight = models.FloatField(default=0.6, validators=[MinValueValidator(0), MaxValueValidator(1)])
    # Whether `weight` came from the formula (and so takes part in anti-inflation scaling).
    weighted = models.BooleanField(default=True)
    layer = models.CharField(
        max_length=16, choices=NarrativeLayer.choices, default=NarrativeLayer.EXPERIENCE
    )
    ntype = models.CharField(max_length=32, default="general")
    tags = models.JSONField(default=list, blank=True)
    entities_role = models.CharField(max_length=300, blank=True)
    related_entities = models.JSONField(default=list, blank=True)
    valence = models.FloatField(
        default=0.0, validators=[MinValueValidator(-1), MaxValueValidator(1)]
    )
    emotion_intensity = models.FloatField(
        default=0.0, validators=[MinValueValidator(0), MaxValueValidator(10)]
    )

    def save(self, *args, **kwargs) -> None:
        self.memory_type = MemoryType.NARRATIVE
        super().save(*args, **kwargs)

    def compose_search_text(self) -> str:
        parts = [self.gesture, self.context, self.moment, self.cognition_direction]
        parts.extend(str(tag) for tag in self.tags)
        return "\n".join(part for part in parts if part)


class FactKind(models.TextChoices):
    PREFERENCE = "preference", "偏好 · preference"
    FACT = "fact", "事实 · fact"
    EPISODE = "episode", "经历 · episode"
    REFLECTION = "reflection", "反思 · reflection"
    IMPRESSION = "impression", "印象 · impression"
    RELATIONSHIP = "relationship", "关系 · relationship"


FACT_KIND_TAGS = {
    FactKind.PREFERENCE: "偏好",
    FactKind.FACT: "事实",
    FactKind.EPISODE: "经历",
    FactKind.REFLECTION: "反思",
    FactKind.IMPRESSION: "印象",
    FactKind.RELATIONSHIP: "关系",
}


class Fact(Memory):
    """dsh's triple about a profile: (kind, predicate, value). The stable predicate is the update key."""

    profile = models.ForeignKey("memory.Profile", on_delete=models.PROTECT, related_name="facts")
    kind = models.CharField(max_length=16, choices=FactKind.choices)
    predicate = models.CharField(
        max_length=41,
        validators=[RegexValidator(PREDICATE_PATTERN, "predicate must match [a-z][a-z0-9_]{1,40}")],
    )
    value = models.CharField(max_length=FACT_VALUE_MAX_CHARS)

    class Meta:
        indexes = [models.Index(fields=["profile", "predicate"], name="fact_profile_predicate")]

    def save(self, *args, **kwargs) -> None:
        self.memory_type = MemoryType.FACT
        super().save(*args, **kwargs)

    def compose_search_text(self) -> str:
        return f"{self.summary}\n{self.value}"

    def compose_stable_key(self) -> str:
        return fact_stable_key(
            scope_id=self.scope_id, profile_id=self.profile_id, predicate=self.predicate
        )

    def clean(self) -> None:
        if len(self.value) > FACT_VALUE_MAX_CHARS:
            raise ValidationError(
                {"value": f"value is longer than {FACT_VALUE_MAX_CHARS} characters"}
            )


class SelfConceptField(models.TextChoices):
    FACT = "fact", "fact"
    TERRAIN = "terrain", "terrain"
    SELF_REFLECTION = "self_reflection", "self-reflection"


class SelfConcept(Memory):
    """The agent's self-concept, one row per version: a new write supersedes, never overwrites."""

    field = models.CharField(max_length=20, choices=SelfConceptField.choices)
    content = models.TextField()

    def save(self, *args, **kwargs) -> None:
        self.memory_type = MemoryType.SELF_CONCEPT
        super().save(*args, **kwargs)

    def compose_search_text(self) -> str:
        return self.content

    def compose_stable_key(self) -> str:
        return self_concept_stable_key(field=self.field)


class NarrativeTag(models.Model):
    """One row per (narrative, tag), lower-cased, so "who shares a tag" is an indexed query on any
    database (JSON containment differs between SQLite and PostgreSQL)."""

    narrative = models.ForeignKey(Narrative, on_delete=models.PROTECT, related_name="tag_rows")
    tag = models.CharField(max_length=100, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["narrative", "tag"], name="narrative_tag_unique")
        ]

    def __str__(self) -> str:
        return self.tag
