from django.db import models


class ProfileKind(models.TextChoices):
    USER = "user", "user"
    PERSON = "person", "person"
    SELF = "self", "self (the agent)"
    PROJECT = "project", "project"


class Profile(models.Model):
    """An entity memories are about. Its current facts are its profile; entity-graph nodes are profiles."""

    scope = models.ForeignKey("memory.Scope", on_delete=models.PROTECT, related_name="profiles")
    kind = models.CharField(max_length=16, choices=ProfileKind.choices)
    name = models.CharField(max_length=120)
    aliases = models.JSONField(default=list, blank=True)
    # Pinned profiles are shown in full in the T3 memory map; the rest get one line.
    pinned = models.BooleanField(default=False)
    description = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "name"], name="profile_scope_name_unique")
        ]
        ordering = ["-pinned", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"
