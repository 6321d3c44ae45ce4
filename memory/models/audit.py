from django.db import models
from django.utils import timezone


class Actor(models.TextChoices):
    OWNER = "owner", "owner"
    AGENT = "agent", "agent"
    RULE = "rule", "rule"
    LLM = "llm", "llm"
    SYSTEM = "system", "system"


class AuditAction(models.TextChoices):
    INSERT = "insert", "insert"
    MERGE = "merge", "merge"
    INVALIDATE = "invalidate", "invalidate"
    SKIP = "skip", "skip"
    REJECT = "reject", "reject"
    EXPIRE = "expire", "expire"
    UPDATE = "update", "update"
    RESTORE = "restore", "restore"
    PIN = "pin", "pin"
    UNPIN = "unpin", "unpin"
    PROMOTE = "promote", "promote"
    REDACT = "redact", "redact"
    RECORD = "record", "record"


class AuditEvent(models.Model):
    """Append-only decision log. Targets are stored by type and id, not foreign key, so the record
    survives whatever happens to the thing it describes (and a database trigger refuses edits)."""

    occurred_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.CharField(max_length=16, choices=Actor.choices)
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    target_type = models.CharField(max_length=40)
    target_id = models.BigIntegerField(null=True, blank=True)
    target_repr = models.CharField(max_length=300, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.CharField(max_length=500)
    request_id = models.CharField(max_length=64, blank=True)
    # The API key a decision was made with: an id, not a foreign key, so the record outlives the key.
    key_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_target")]
        ordering = ["-occurred_at", "-id"]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.target_type}#{self.target_id}: {self.reason}"
