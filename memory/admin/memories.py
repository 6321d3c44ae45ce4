"""Memories on the owner panel: every kind together, then narratives, facts and the self-concept,
each list leading with its human summary."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from memory.admin.actions import LIFECYCLE_ACTIONS, LIFECYCLE_CALLS, lifecycle_apply
from memory.admin.audit import MemoryTouchedFilter
from memory.admin.base import ReadOnlyAdmin, ReadOnlyInline, owner_reason
from memory.admin.display import (
    LIFECYCLE_TITLE,
    RAW_KEYS_TITLE,
    audit_trail,
    expiry_actor_subquery,
    pretty_json,
    scoped_summary,
    short_date,
    status_text,
)
from memory.models import (
    Actor,
    AuditAction,
    AuditEvent,
    Evidence,
    Fact,
    Memory,
    MemoryStatus,
    Narrative,
    SelfConcept,
)
from memory.models.memories import FACT_VALUE_MAX_CHARS
from memory.services.edits import memory_update
from memory.services.errors import TidelineError
from memory.services.lifecycle import RESTORABLE

LIFECYCLE_FIELDS = (
    "status_line",
    "confidence",
    "pinned",
    "secret",
    "valid_from",
    "valid_to",
    "recorded_at",
    "expires_at",
    "last_activated",
    "activation_count",
)
RAW_MEMORY_FIELDS = (
    "id",
    "memory_type",
    "status",
    "expired_by",
    "supersedes",
    "superseded_by",
    "depends_on_json",
    "embedding_status",
    "embedding_model",
    "search_text",
    "updated_at",
)


class EvidenceInline(ReadOnlyInline):
    model = Evidence
    fk_name = "memory"
    fields = ("turn", "turn_text", "quote", "created_at")
    readonly_fields = fields
    verbose_name = "来源 · evidence"
    verbose_name_plural = "来源 · evidence (the raw turns this memory came from)"

    @admin.display(description="what was said")
    def turn_text(self, evidence: Evidence) -> str:
        return evidence.turn.content[:300]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("turn")


class MemoryAdminBase(ReadOnlyAdmin):
    list_display = ("summary_line", "kind_line", "status_line", "pinned", "recorded_line")
    list_display_links = ("summary_line",)
    list_filter = ("scope", "status", "pinned", "embedding_status")
    list_select_related = ("scope",)
    search_fields = ("summary", "search_text")
    search_help_text = "Words of the summary or of the memory's text"
    actions = LIFECYCLE_ACTIONS
    inlines = [EvidenceInline]
    show_full_result_count = False
    list_per_page = 50
    readonly_fields = (
        "summary_line",
        "kind_line",
        "status_line",
        "audit_trail_table",
        "depends_on_json",
    )
    main_fields: tuple = ()
    extra_raw_fields: tuple = ()
    change_form_template = "admin/memory/memory_change_form.html"

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(expiry_actor=expiry_actor_subquery())

    def get_urls(self):
        opts = self.opts
        return [
            path(
                "<int:memory_id>/lifecycle/<str:verb>/",
                self.admin_site.admin_view(self.lifecycle_view),
                name=f"{opts.app_label}_{opts.model_name}_lifecycle",
            ),
            *super().get_urls(),
        ]

    def change_view(self, request: HttpRequest, object_id: str, form_url="", extra_context=None):
        memory = self.get_object(request, object_id)
        buttons = []
        if memory is not None and self.has_owner_action_permission(request):
            opts = self.opts
            name = f"admin:{opts.app_label}_{opts.model_name}_lifecycle"
            verbs = [
                *(["expire"] if memory.status != MemoryStatus.EXPIRED else []),
                *(["restore"] if memory.status in RESTORABLE else []),
                "unpin" if memory.pinned else "pin",
                "unsecret" if memory.secret else "secret",
            ]
            buttons = [(reverse(name, args=[memory.pk, verb]), verb) for verb in verbs]
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), "lifecycle_buttons": buttons}
        )

    def lifecycle_view(self, request: HttpRequest, memory_id: int, verb: str) -> HttpResponse:
        """The buttons on a memory's own page: the same audited service calls as the actions."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if verb not in LIFECYCLE_CALLS:
            raise Http404(f"unknown lifecycle action {verb!r}")
        if not self.has_owner_action_permission(request):
            raise PermissionDenied
        # Memory ids are shared by every kind: a narrative's id on the fact page must not pin the
        # narrative and then send the owner to a fact that does not exist.
        if self.get_object(request, str(memory_id)) is None:
            raise Http404(f"no {self.opts.verbose_name} #{memory_id}")
        lifecycle_apply(request, verb=verb, ids=[memory_id])
        opts = self.opts
        return HttpResponseRedirect(
            reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[memory_id])
        )

    def get_fieldsets(self, request: HttpRequest, obj=None):
        return [
            (None, {"fields": ("summary_line", "scope", *self.main_fields)}),
            (LIFECYCLE_TITLE, {"fields": LIFECYCLE_FIELDS}),
            ("审计 · audit trail", {"fields": ("audit_trail_table",)}),
            (
                RAW_KEYS_TITLE,
                {"classes": ("collapse",), "fields": RAW_MEMORY_FIELDS + self.extra_raw_fields},
            ),
        ]

    def history_view(self, request: HttpRequest, object_id: str, extra_context=None):
        """A memory's history is its audit trail, not Django's admin log (which the services,
        the only writers, do not use)."""
        query = urlencode({MemoryTouchedFilter.parameter_name: object_id})
        return HttpResponseRedirect(f"{reverse('admin:memory_auditevent_changelist')}?{query}")

    @admin.display(description="摘要 · summary", ordering="summary")
    def summary_line(self, memory: Memory) -> str:
        return scoped_summary(memory)

    @admin.display(description="类型 · kind", ordering="memory_type")
    def kind_line(self, memory: Memory) -> str:
        return memory.get_memory_type_display()

    @admin.display(description="状态 · status", ordering="status")
    def status_line(self, memory: Memory) -> str:
        return status_text(memory)

    @admin.display(description="记录 · recorded", ordering="recorded_at")
    def recorded_line(self, memory: Memory) -> str:
        return short_date(memory.recorded_at)

    @admin.display(description="decisions, newest first")
    def audit_trail_table(self, memory: Memory) -> str:
        return audit_trail(memory)

    @admin.display(description="depends on")
    def depends_on_json(self, memory: Memory) -> str:
        return pretty_json(memory.depends_on)


@admin.register(Memory)
class MemoryAdmin(MemoryAdminBase):
    """Every kind in one list: where the owner searches when they do not know what kind it is."""

    list_filter = ("scope", "status", "memory_type", "pinned", "embedding_status")

    @admin.display(description="the typed record")
    def typed_record(self, memory: Memory) -> str:
        child = memory.child
        url = reverse(f"admin:memory_{child._meta.model_name}_change", args=[child.pk])
        return format_html('<a href="{}">{}</a>', url, child._meta.verbose_name)

    readonly_fields = (*MemoryAdminBase.readonly_fields, "typed_record")
    main_fields = ("kind_line", "typed_record")


@admin.register(Narrative)
class NarrativeAdmin(MemoryAdminBase):
    list_display = (
        "summary_line",
        "layer",
        "weight_short",
        "status_line",
        "pinned",
        "recorded_line",
    )
    list_filter = ("scope", "status", "layer", "ntype", "pinned", "embedding_status")
    readonly_fields = (*MemoryAdminBase.readonly_fields, "weight_line", "tags_line")
    main_fields = (
        "gesture",
        "context",
        "moment",
        "cognition_direction",
        "weight_line",
        "layer",
        "ntype",
        "tags_line",
        "entities_role",
        "valence",
        "emotion_intensity",
    )
    extra_raw_fields = (
        "importance",
        "emotional",
        "recurrence",
        "unresolved",
        "weight",
        "weighted",
        "tags",
        "related_entities",
    )

    @admin.display(description="权重 · weight", ordering="weight")
    def weight_line(self, narrative: Narrative) -> str:
        return (
            f"{narrative.weight:.2f}  (importance {narrative.importance} · emotional "
            f"{narrative.emotional} · recurrence {narrative.recurrence} · unresolved "
            f"{narrative.unresolved})"
        )

    @admin.display(description="权重 · weight", ordering="weight")
    def weight_short(self, narrative: Narrative) -> str:
        """The weight alone; its four dimensions are on hover and on the memory's page."""
        return format_html(
            '<span title="importance {} · emotional {} · recurrence {} · unresolved {}">{}</span>',
            narrative.importance,
            narrative.emotional,
            narrative.recurrence,
            narrative.unresolved,
            f"{narrative.weight:.2f}",
        )

    @admin.display(description="标签 · tags")
    def tags_line(self, narrative: Narrative) -> str:
        return " · ".join(str(tag) for tag in narrative.tags) or "—"


class SupersedeForm(forms.Form):
    value = forms.CharField(
        max_length=FACT_VALUE_MAX_CHARS,
        label="New value",
        help_text=f"At most {FACT_VALUE_MAX_CHARS} characters.",
    )
    summary = forms.CharField(
        max_length=500,
        required=False,
        label="New summary",
        help_text="One human sentence; leave empty to compose it from the new value.",
    )
    reason = forms.CharField(max_length=300, required=False, label="Why")


@admin.register(Fact)
class FactAdmin(MemoryAdminBase):
    list_display = (
        "summary_line",
        "kind_short",
        "profile_line",
        "status_line",
        "pinned",
        "valid_line",
    )
    list_filter = ("scope", "status", "kind", "pinned", "embedding_status")
    list_select_related = ("scope", "profile")
    search_fields = ("summary", "search_text", "value", "profile__name")
    actions = [*LIFECYCLE_ACTIONS, "supersede_with_edit"]
    readonly_fields = (*MemoryAdminBase.readonly_fields, "supersede_link")
    main_fields = ("profile", "kind", "value", "supersede_link")
    extra_raw_fields = ("predicate",)

    @admin.display(description="有效 · valid since", ordering="valid_from")
    def valid_line(self, fact: Fact) -> str:
        since = short_date(fact.valid_from)
        return f"{since} → {short_date(fact.valid_to)}" if fact.valid_to else since

    @admin.display(description="类型 · kind", ordering="kind")
    def kind_short(self, fact: Fact) -> str:
        """ "偏好 · preference" on two lines, so the summary keeps the width."""
        label = fact.get_kind_display()
        return format_html("{}<br>{}", *label.split(" · ", 1)) if " · " in label else label

    @admin.display(description="关于 · about", ordering="profile__name")
    def profile_line(self, fact: Fact) -> str:
        return format_html(
            '<span title="{}">{}</span>', fact.profile.get_kind_display(), fact.profile.name
        )

    @admin.display(description="change the value")
    def supersede_link(self, fact: Fact) -> str:
        if fact.status != MemoryStatus.ACTIVE:
            return "Only the current value of a key can be superseded."
        url = reverse("admin:memory_fact_supersede", args=[fact.pk])
        return format_html('<a class="button" href="{}">Supersede with an edited value</a>', url)

    def get_urls(self):
        return [
            path(
                "<int:fact_id>/supersede/",
                self.admin_site.admin_view(self.supersede_view),
                name="memory_fact_supersede",
            ),
            *super().get_urls(),
        ]

    @admin.action(description="Supersede with an edited value", permissions=["owner_action"])
    def supersede_with_edit(self, request: HttpRequest, queryset) -> HttpResponse | None:
        ids = list(queryset.values_list("pk", flat=True)[:2])
        if len(ids) != 1:
            messages.error(request, "Select exactly one fact to supersede with an edited value.")
            return None
        return HttpResponseRedirect(reverse("admin:memory_fact_supersede", args=[ids[0]]))

    def supersede_view(self, request: HttpRequest, fact_id: int) -> HttpResponse:
        """The old row stays, marked superseded with `valid_to`; the store's one edit service
        writes the new value under the same stable key and records the decision."""
        if not self.has_owner_action_permission(request):
            raise PermissionDenied
        fact = self.get_object(request, str(fact_id))
        if fact is None:
            raise Http404(f"unknown fact {fact_id}")
        change_url = reverse("admin:memory_fact_change", args=[fact.pk])
        if fact.status != MemoryStatus.ACTIVE:
            messages.error(
                request,
                f"#{fact.pk} is {fact.status}; only the current value of a key can be superseded.",
            )
            return HttpResponseRedirect(change_url)
        form = SupersedeForm(request.POST or None, initial={"value": fact.value})
        if request.method == "POST" and form.is_valid():
            why = form.cleaned_data["reason"].strip()
            try:
                summary = form.cleaned_data["summary"].strip()
                new = memory_update(
                    memory=fact,
                    changes={
                        "value": form.cleaned_data["value"],
                        **({"summary": summary} if summary else {}),
                    },
                    actor=Actor.OWNER,
                    reason=owner_reason(request, f"superseded #{fact.pk} with an edited value")
                    + (f" ({why})" if why else ""),
                )
            except TidelineError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                if new.pk == fact.pk:
                    messages.warning(request, "Same value as the current one: nothing changed.")
                    return HttpResponseRedirect(change_url)
                if new.status == MemoryStatus.REJECTED:
                    form.add_error(None, self._gate_refusal(new))
                else:
                    messages.success(request, f"#{fact.pk} superseded by #{new.pk}: {new.summary}")
                    return HttpResponseRedirect(reverse("admin:memory_fact_change", args=[new.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Supersede with an edited value",
            "fact": fact,
            "summary": scoped_summary(fact),
            "form": form,
            "change_url": change_url,
        }
        return TemplateResponse(request, "admin/memory/fact/supersede.html", context)

    @staticmethod
    def _gate_refusal(rejected: Fact) -> str:
        """The write gate keeps what it refuses as a rejected row; say why, from its audit row."""
        event = AuditEvent.objects.filter(
            target_type="fact", target_id=rejected.pk, action=AuditAction.REJECT
        ).first()
        why = event.reason if event else "refused by the write gate"
        return (
            f"The write gate refused this value: {why}. It is kept as rejected #{rejected.pk}; "
            "the current value is unchanged."
        )


@admin.register(SelfConcept)
class SelfConceptAdmin(MemoryAdminBase):
    list_display = ("summary_line", "field", "status_line", "recorded_line")
    list_filter = ("field", "status")
    main_fields = ("field", "content")
