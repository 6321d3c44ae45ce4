"""`manage.py stats`: how much is stored, in which states, and what is waiting."""

from django.core.management.base import BaseCommand
from django.db.models import Count

from memory.models import AuditEvent, InboxItem, Memory, Scope
from memory.services.llm import llm_config_load


class Command(BaseCommand):
    help = "Counts by status, kind and scope; inbox backlog; audit log size; LLM configuration."

    def handle(self, *args, **options) -> None:
        def table(title: str, rows) -> None:
            rows = list(rows)
            self.stdout.write(
                f"{title}: " + (", ".join(f"{key} {count}" for key, count in rows) or "none")
            )

        table(
            "memories by status",
            Memory.objects.values_list("status").annotate(n=Count("pk")).order_by("status"),
        )
        table(
            "memories by type",
            Memory.objects.values_list("memory_type")
            .annotate(n=Count("pk"))
            .order_by("memory_type"),
        )
        table(
            "active memories by scope",
            Memory.objects.filter(status="active")
            .values_list("scope__label")
            .annotate(n=Count("pk"))
            .order_by("-n", "scope__label"),
        )
        table(
            "expired by",
            Memory.objects.filter(status="expired")
            .values_list("expired_by")
            .annotate(n=Count("pk"))
            .order_by("expired_by"),
        )
        table(
            "embeddings",
            Memory.objects.values_list("embedding_status")
            .annotate(n=Count("pk"))
            .order_by("embedding_status"),
        )
        table(
            "inbox",
            InboxItem.objects.values_list("status").annotate(n=Count("pk")).order_by("status"),
        )
        table("scopes", Scope.objects.values_list("kind").annotate(n=Count("pk")).order_by("kind"))
        self.stdout.write(f"audit events: {AuditEvent.objects.count()}")
        config = llm_config_load()
        if config is None:
            self.stdout.write("LLM: not configured (rules only)")
        else:
            public = config.public()
            self.stdout.write(
                f"LLM: {public['model']} at {public['base_url']} (key {'set' if public['api_key_set'] else 'not set'})"
            )
