"""Bad input on the owner panel: whatever the URL or a tampered form holds, the answer is a 4xx or
Django's own `?e=1` redirect, never a 500."""

import pytest
from django.contrib import admin
from django.db import models
from django.urls import reverse

from memory.models import AuditEvent, Fact, Memory, Scope, Thread
from memory.services.narratives import NarrativeInput, narrative_write
from tideline_site import urls as _urlconf  # noqa: F401 — registers the model admins

HUGE_ID = "99999999999999999999999"
BAD_YEARS = ("0", "99999")
# Filters into a JSON field that one database or the other cannot run: SQLite has no `contains`
# or `contained_by` on JSON and no negative array index, PostgreSQL no index past 32 bits, and an
# empty key list is no SQL on SQLite. Each also one key down.
JSON_LOOKUPS = (
    ("contains", "[]"),
    ("contained_by", '"'),
    ("has_keys", ""),
    ("has_any_keys", ""),
    ("-1", "1"),
    (str(2**31), "1"),
)


def changelist_url(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def bad_filters(model, model_admin) -> list[dict[str, str]]:
    """Every filter a URL can put on this changelist that reaches the database as a number: each
    integer or key field by name and the way its list filter names it, each date field's year,
    and each custom list filter's parameter; and each JSON field's lookups a database lacks."""
    queries = []
    for field in model._meta.concrete_fields:
        if field.is_relation:
            queries += [
                {field.name: HUGE_ID},
                {f"{field.name}__{field.target_field.name}__exact": HUGE_ID},
            ]
        elif isinstance(field, models.IntegerField | models.AutoField):
            queries += [{field.name: HUGE_ID}, {f"{field.name}__exact": HUGE_ID}]
        elif isinstance(field, models.DateField):
            queries += [{f"{field.name}__year": year} for year in BAD_YEARS]
        elif isinstance(field, models.JSONField):
            queries += [
                {f"{field.name}{key}__{lookup}": value}
                for lookup, value in JSON_LOOKUPS
                for key in ("", "__a")
            ]
    for list_filter in model_admin.list_filter:
        if isinstance(list_filter, type) and issubclass(list_filter, admin.SimpleListFilter):
            queries += [{list_filter.parameter_name: value} for value in (HUGE_ID, "²")]
    return queries


def assert_no_server_error(response, what) -> None:
    assert response.status_code < 500, what
    if response.status_code == 302:
        assert response["Location"].endswith("?e=1"), what


def test_it_redirects_every_changelist_filter_the_database_cannot_run_instead_of_failing(
    owner_client,
):
    for model, model_admin in admin.site._registry.items():
        url = changelist_url(model)
        for query in bad_filters(model, model_admin):
            response = owner_client.get(url, query)
            assert_no_server_error(response, f"{model._meta.label} {query}")
        assert owner_client.get(url).status_code == 200, model._meta.label
        for view in ("change", "delete", "history"):
            name = f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}"
            response = owner_client.get(reverse(name, args=[HUGE_ID]), follow=True)
            assert response.status_code in {200, 403}, f"{model._meta.label} {view}"


# The first fails to compile everywhere; PostgreSQL's regular expressions have no named groups.
@pytest.mark.parametrize("pattern", ["(", "(?P<name>x)"])
def test_it_redirects_a_filter_pattern_the_database_refuses_and_keeps_serving(
    owner_client, global_scope, pattern
):
    url = changelist_url(Scope)
    response = owner_client.get(url, {"label__regex": pattern})
    assert_no_server_error(response, pattern)
    # A repeated filter is one filter per value: the bad one may come before a good one.
    response = owner_client.get(url, {"label__regex": [pattern, global_scope.label]})
    assert_no_server_error(response, f"{pattern}, {global_scope.label}")
    # On PostgreSQL a failed statement would leave the test's transaction refusing the next one.
    assert global_scope.label in owner_client.get(url).content.decode()


@pytest.mark.parametrize("memory", ["²", "١", HUGE_ID, str(2**63)])
def test_it_lists_the_whole_audit_log_for_a_memory_filter_that_is_no_id(owner_client, memory):
    response = owner_client.get(reverse("admin:memory_auditevent_changelist"), {"memory": memory})
    assert response.status_code == 200
    assert response.context["cl"].has_active_filters is False


def test_it_follows_a_history_link_of_no_id_to_the_unfiltered_audit_log(owner_client):
    response = owner_client.get("/admin/memory/memory/%C2%B2/history/", follow=True)
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", f"/admin/memory/fact/{HUGE_ID}/supersede/"),
        ("post", f"/admin/memory/fact/{2**63}/supersede/"),
        ("post", f"/admin/memory/narrative/{HUGE_ID}/lifecycle/pin/"),
    ],
)
def test_it_answers_404_for_an_id_past_the_keys_range_in_the_panels_own_urls(
    owner_client, method, url
):
    assert getattr(owner_client, method)(url).status_code == 404


@pytest.mark.parametrize(
    ("model", "action"),
    [(Memory, "pin"), (Thread, "mark_open"), (Fact, "supersede_with_edit")],
)
@pytest.mark.parametrize("selected", ["abc", HUGE_ID, "²"])
def test_it_refuses_an_action_on_a_selection_that_is_no_id_and_changes_nothing(
    owner_client, preference, model, action, selected
):
    baseline = AuditEvent.objects.count()
    response = owner_client.post(
        changelist_url(model),
        {"action": action, "_selected_action": [str(preference.pk), selected]},
    )
    assert response.status_code == 302
    assert AuditEvent.objects.count() == baseline
    preference.refresh_from_db()
    assert preference.pinned is False
    page = owner_client.get(response["Location"]).content.decode()
    assert "is not a row id; nothing was changed." in page


def test_it_pins_through_a_memorys_page_only_a_memory_of_that_pages_kind(
    owner_client, preference, project_scope
):
    narrative = narrative_write(
        data=NarrativeInput(scope_id=project_scope.pk, gesture="we keep the archive layout")
    )
    baseline = AuditEvent.objects.count()
    wrong_page = reverse("admin:memory_fact_lifecycle", args=[narrative.pk, "pin"])
    assert owner_client.post(wrong_page).status_code == 404
    narrative.refresh_from_db()
    assert narrative.pinned is False
    assert AuditEvent.objects.count() == baseline

    own_page = reverse("admin:memory_narrative_lifecycle", args=[narrative.pk, "pin"])
    response = owner_client.post(own_page)
    assert response["Location"] == reverse("admin:memory_narrative_change", args=[narrative.pk])
    narrative.refresh_from_db()
    assert narrative.pinned is True
    everything_page = reverse("admin:memory_memory_lifecycle", args=[preference.pk, "pin"])
    assert owner_client.post(everything_page).status_code == 302
