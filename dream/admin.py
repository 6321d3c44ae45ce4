"""The owner's view of DREAM: run history, topic and soft clusters, the entity graph, and the
attention heatmap drawn as a picture. Everything here is read-only: DREAM's rows are written by
DREAM, and its memories are changed through the memory pages and services."""

import json

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from dream.heatmap import heatmap_svg
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
from dream.selectors import attention_heatmap_read
from memory.admin.base import ReadOnlyAdmin, ReadOnlyInline
from memory.models import Thread, ThreadStatus

HEATMAP_DAYS = (7, 30, 90)
MEMORY_VIEW_PERMISSION = "memory.view_memory"


def _memory_link(memory_id: int, text: str) -> str:
    url = reverse("admin:memory_memory_change", args=[memory_id])
    return format_html('<a href="{}">#{}</a> {}', url, memory_id, text)


@admin.register(DreamRun)
class DreamRunAdmin(ReadOnlyAdmin):
    list_display = (
        "started_at",
        "layer",
        "day",
        "status",
        "trigger",
        "duration",
        "tokens",
        "outcomes",
    )
    list_filter = ("status", "layer", "trigger", "day")
    date_hierarchy = "started_at"
    readonly_fields = (
        "layer",
        "day",
        "status",
        "trigger",
        "started_at",
        "finished_at",
        "tokens",
        "error",
        "stats_pretty",
    )
    fields = readonly_fields

    @admin.display(description="took")
    def duration(self, run: DreamRun) -> str:
        if run.finished_at is None:
            return "—"
        return f"{(run.finished_at - run.started_at).total_seconds():.1f} s"

    @admin.display(description="layers")
    def outcomes(self, run: DreamRun) -> str:
        layers = (run.stats or {}).get("layers") or {}
        order = (run.stats or {}).get("order") or list(layers)
        return " · ".join(
            f"{name} {layers[name].get('status', '?')}" for name in order if name in layers
        )

    @admin.display(description="what each layer did")
    def stats_pretty(self, run: DreamRun) -> str:
        return format_html(
            '<pre style="white-space: pre-wrap">{}</pre>',
            json.dumps(run.stats, ensure_ascii=False, indent=2),
        )

    def get_urls(self):
        return [
            path(
                "attention/",
                self.admin_site.admin_view(self.attention_view),
                name="dream_attention_heatmap",
            ),
            *super().get_urls(),
        ]

    def attention_view(self, request: HttpRequest) -> HttpResponse:
        # The picture names clusters after memory text: whoever may not view memories may not
        # see it, staff or not.
        if not request.user.has_perm(MEMORY_VIEW_PERMISSION):
            raise PermissionDenied
        try:
            days = int(request.GET.get("days", 30))
        except ValueError:
            days = 30
        days = days if days in HEATMAP_DAYS else 30
        heatmap = attention_heatmap_read(days=days)
        deserts = [row for row in heatmap["clusters"] if row["heat"] == 0]
        threads = Thread.objects.filter(status=ThreadStatus.OPEN).order_by("-weight")[:10]
        context = {
            **self.admin_site.each_context(request),
            "title": "Attention heatmap",
            "opts": self.opts,
            "svg": heatmap_svg(heatmap),
            "days": days,
            "day_choices": HEATMAP_DAYS,
            "heatmap": heatmap,
            "deserts": deserts,
            "threads": threads,
        }
        return TemplateResponse(request, "admin/dream/attention.html", context)


class TopicMemberInline(ReadOnlyInline):
    model = TopicClusterMember
    fields = ("memory",)
    readonly_fields = ("memory",)
    show_change_link = False

    @admin.display(description="narrative")
    def memory(self, member: TopicClusterMember) -> str:
        return _memory_link(member.narrative_id, member.narrative.gesture)


@admin.register(TopicCluster)
class TopicClusterAdmin(ReadOnlyAdmin):
    list_display = ("term", "scope", "size", "merged_terms", "built_at")
    list_filter = ("scope",)
    search_fields = ("term",)
    readonly_fields = ("term", "scope", "terms", "size", "built_at")
    inlines = [TopicMemberInline]

    @admin.display(description="terms")
    def merged_terms(self, cluster: TopicCluster) -> str:
        return " · ".join(cluster.terms or [cluster.term])


class SoftMemberInline(ReadOnlyInline):
    model = EmbeddingClusterMember
    fields = ("rank", "distance", "memory_line")
    readonly_fields = ("rank", "distance", "memory_line")
    ordering = ("rank", "distance")
    show_change_link = False

    @admin.display(description="memory")
    def memory_line(self, member: EmbeddingClusterMember) -> str:
        return _memory_link(member.memory_id, member.memory.summary)


@admin.register(EmbeddingCluster)
class EmbeddingClusterAdmin(ReadOnlyAdmin):
    list_display = ("index", "scope", "name", "size", "neighbours", "built_at")
    list_filter = ("scope",)
    search_fields = ("name",)
    readonly_fields = (
        "index",
        "scope",
        "name",
        "size",
        "embedding_model",
        "built_at",
        "neighbours",
    )
    fields = readonly_fields
    inlines = [SoftMemberInline]

    @admin.display(description="adjacent clusters (shared narratives)")
    def neighbours(self, cluster: EmbeddingCluster) -> str:
        rows = EmbeddingClusterAdjacency.objects.filter(
            cluster_a=cluster
        ) | EmbeddingClusterAdjacency.objects.filter(cluster_b=cluster)
        pairs = sorted(
            (
                (
                    row.shared,
                    row.cluster_b_id if row.cluster_a_id == cluster.pk else row.cluster_a_id,
                )
                for row in rows
            ),
            reverse=True,
        )[:5]
        names = dict(
            EmbeddingCluster.objects.filter(pk__in=[pk for _, pk in pairs]).values_list(
                "pk", "index"
            )
        )
        return format_html_join(" · ", "#{} ({})", ((names[pk], shared) for shared, pk in pairs))


@admin.register(EntityNode)
class EntityNodeAdmin(ReadOnlyAdmin):
    list_display = ("name", "scope", "mentions", "role_summary", "profile")
    list_filter = ("scope",)
    search_fields = ("name",)
    readonly_fields = ("name", "scope", "mentions", "role_summary", "profile", "pairs")
    fields = readonly_fields

    @admin.display(description="roles")
    def role_summary(self, node: EntityNode) -> str:
        return " · ".join(
            f"{role} ×{n}" for role, n in sorted(node.roles.items(), key=lambda i: -i[1])
        )

    @admin.display(description="appears with")
    def pairs(self, node: EntityNode) -> str:
        edges = (
            EntityEdge.objects.filter(node_a=node) | EntityEdge.objects.filter(node_b=node)
        ).select_related("node_a", "node_b")
        return format_html_join(
            "",
            "<div>{} ×{} — {}</div>",
            (
                (
                    edge.node_b.name if edge.node_a_id == node.pk else edge.node_a.name,
                    edge.cooccurrence,
                    ", ".join(f"{pair} ×{n}" for pair, n in edge.role_pairs.items()),
                )
                for edge in edges
            ),
        )
