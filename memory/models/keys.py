import hashlib

from django.db import models
from django.utils import timezone


class ApiKey(models.Model):
    """A bearer key for REST and MCP HTTP. Only its SHA-256 is stored; it reads and writes only the
    scopes it is bound to (plus global when `include_global` is set)."""

    name = models.CharField(max_length=120)
    prefix = models.CharField(max_length=16, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.ManyToManyField("memory.Scope", related_name="api_keys", blank=True)
    include_global = models.BooleanField(default=True)
    can_write = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def hash_secret(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()
