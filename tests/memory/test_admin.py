import json

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Group, Permission, User
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone

from dream.models import DreamRun
from memory.models import (
    Actor,
    ApiKey,
    AttentionEvent,
    AuditEvent,
    Fact,
    FactKind,
    InboxItem,
    MemoryStatus,
    Narrative,
    Thread,
    ThreadStatus,
)
from memory.services.edits import memory_update
from memory.services.embedding import words_embed
from memory.services.facts import FactInput, fact_write
from memory.services.lifecycle import memory_expire
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.self_concept import self_concept_write
from memory.services.threads import snapshot_write, thread_write
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.memory.conftest import PREFERENCE_SUMMARY
from tideline_site import urls as _urlconf  # noqa: F401 — registers the model admins


@pytest.fixture
def project_fact(project_scope):
    return fact_write(
        data=FactInput(
            scope_id=project_scope.pk,
            profile_name="archive-manager",
            profile_kind="project",
            kind=FactKind.FACT,
            predicate="security_status",
            value="has_vulnerabilities",
        )
    )


@pytest.fixture
def everything(global_scope, project_scope, preference, project_fact):
    """One row of every memory-app model, written through the services that own them. Inbox
    capture, recall and key minting belong to other services, so those rows are stored plainly."""
    session = session_start(
        runtime="claude-code", external_id="s-1", scope_id=project_scope.pk, cwd="/work/am"
    )
    turns = turns_record(
        session_id=session.pk,
        turns=[
            TurnInput(role="user", content="归档的时候要保留原始的目录结构"),
            TurnInput(role="assistant", content="好的，解压时保留目录结构。"),
        ],
    )
    narrative = narrative_write(
        data=NarrativeInput(
            scope_id=project_scope.pk,
            gesture="用户坚持归档保留原始目录结构，语气很确定",
            cognition_direction="解压逻辑要按目录树恢复",
            tags=["archive", "layout"],
            source_turn_ids=[turns[0].pk],
        )
    )
    self_concept_write(field="fact", content="我是 Tideline 的记忆助手")
    snapshot_write(scope_id=project_scope.pk, content="正在重写解压模块", session_id=session.pk)
    thread_write(scope_id=project_scope.pk, content="目录结构之外，权限位要不要保留？")
    InboxItem.objects.create(scope=project_scope, content="以后都用 pnpm 不用 npm")
    words_embed(texts=["keep the archive layout"])
    AttentionEvent.objects.create(memory=narrative, session=session, source="t1_prefetch")
    key = ApiKey.objects.create(
        name="laptop", prefix="tl_abcd", key_hash=ApiKey.hash_secret("tl_abcd_secret")
    )
    key.scopes.add(project_scope)
    Group.objects.create(name="readers")
    return {"narrative": narrative, "session": session}


def admin_url(model, view: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def post_action(client, model, action: str, *pks) -> object:
    return client.post(
        admin_url(model, "changelist"),
        {"action": action, "_selected_action": [str(pk) for pk in pks]},
        follow=True,
    )


def test_it_renders_every_registered_model_and_offers_delete_nowhere(
    owner_client, owner, everything
):
    request = RequestFactory().get("/admin/")
    request.user = owner
    for model, model_admin in admin.site._registry.items():
        name = model._meta.label
        changelist = owner_client.get(admin_url(model, "changelist"))
        assert changelist.status_code == 200, name
        assert b'value="delete_selected"' not in changelist.content, name
        obj = model._default_manager.order_by("pk").first()
        if model._meta.app_label in {"memory", "auth"}:
            assert obj is not None, f"the fixture writes no {name}"
        if obj is not None:
            change = owner_client.get(admin_url(model, "change", obj.pk))
            assert change.status_code == 200, name
            assert b"deletelink" not in change.content, name
            assert owner_client.get(admin_url(model, "delete", obj.pk)).status_code == 403, name
            assert owner_client.post(admin_url(model, "delete", obj.pk)).status_code == 403, name
        if model_admin.has_add_permission(request):
            assert owner_client.get(admin_url(model, "add")).status_code == 200, name
        else:
            assert owner_client.get(admin_url(model, "add")).status_code == 403, name
    assert "delete_selected" not in dict(admin.site.actions)
    assert set(apps.get_app_config("memory").get_models()) <= set(admin.site._registry)


def test_it_leads_the_fact_list_with_the_summary_and_folds_the_raw_keys(
    owner_client, preference, project_fact
):
    listing = owner_client.get(admin_url(Fact, "changelist")).content.decode()
    assert PREFERENCE_SUMMARY in listing
    assert "[项目·archive-manager] [事实] archive-manager · security status" in listing
    assert "responds_in" not in listing
    page = owner_client.get(admin_url(Fact, "change", preference.pk)).content.decode()
    raw_start = page.index("原始键名 · raw keys")
    assert page.rfind("<details", 0, raw_start) > page.index(PREFERENCE_SUMMARY)
    assert page.index("responds_in") > raw_start


def test_it_finds_a_memory_by_words_of_its_summary_and_filters_by_kind(
    owner_client, preference, project_fact
):
    found = owner_client.get(admin_url(Fact, "changelist"), {"q": "简体中文"}).content.decode()
    assert PREFERENCE_SUMMARY in found
    assert "security status" not in found
    by_kind = owner_client.get(
        reverse("admin:memory_memory_changelist"), {"memory_type__exact": "fact", "q": "security"}
    ).content.decode()
    assert "has_vulnerabilities" in by_kind
    assert PREFERENCE_SUMMARY not in by_kind


@pytest.mark.parametrize(
    ("action", "audit_action", "before"),
    [
        ("expire", "expire", {}),
        ("restore", "restore", {"expired": True}),
        ("pin", "pin", {}),
        ("unpin", "unpin", {"pinned": True}),
    ],
)
def test_it_runs_each_lifecycle_action_through_the_service_with_one_owner_audit_row(
    owner_client, preference, action, audit_action, before
):
    if before.get("expired"):
        memory_expire(memory_id=preference.pk, actor=Actor.AGENT, reason="set-up")
    if before.get("pinned"):
        owner_client.post(
            reverse("admin:memory_memory_changelist"),
            {"action": "pin", "_selected_action": [preference.pk]},
        )
    baseline = AuditEvent.objects.count()
    response = post_action(owner_client, Fact, action, preference.pk)
    assert response.status_code == 200
    assert AuditEvent.objects.count() == baseline + 1
    event = AuditEvent.objects.order_by("-id").first()
    assert (event.actor, event.action, event.target_id) == ("owner", audit_action, preference.pk)
    assert "owner panel" in event.reason and "by owner" in event.reason
    preference.refresh_from_db()
    expected = {
        "expire": (MemoryStatus.EXPIRED, False),
        "restore": (MemoryStatus.ACTIVE, False),
        "pin": (MemoryStatus.ACTIVE, True),
        "unpin": (MemoryStatus.ACTIVE, False),
    }[action]
    assert (preference.status, preference.pinned) == expected


def test_it_shows_a_refused_action_as_a_message_and_writes_nothing(owner_client, preference):
    memory_expire(memory_id=preference.pk, actor=Actor.AGENT, reason="set-up")
    baseline = AuditEvent.objects.count()
    response = post_action(owner_client, Fact, "expire", preference.pk)
    assert response.status_code == 200
    assert "already expired" in response.content.decode()
    assert AuditEvent.objects.count() == baseline


def test_it_supersedes_a_fact_with_an_edited_value(owner_client, project_fact):
    response = owner_client.post(
        admin_url(Fact, "changelist"),
        {"action": "supersede_with_edit", "_selected_action": [project_fact.pk]},
    )
    form_url = reverse("admin:memory_fact_supersede", args=[project_fact.pk])
    assert response.status_code == 302 and response.url == form_url
    assert owner_client.get(form_url).status_code == 200
    response = owner_client.post(form_url, {"value": "fixed", "reason": "patched in 2.3"})
    assert response.status_code == 302
    project_fact.refresh_from_db()
    assert project_fact.status == MemoryStatus.SUPERSEDED
    assert project_fact.valid_to is not None
    new = Fact.objects.get(status=MemoryStatus.ACTIVE, predicate="security_status")
    assert (new.value, new.supersedes_id) == ("fixed", project_fact.pk)
    event = AuditEvent.objects.order_by("-id").first()
    assert (event.actor, event.action, event.target_id) == ("owner", "invalidate", new.pk)
    assert "by owner" in event.reason and "patched in 2.3" in event.reason


def test_it_refuses_a_bad_edited_value_without_writing(owner_client, project_fact):
    form_url = reverse("admin:memory_fact_supersede", args=[project_fact.pk])
    baseline = AuditEvent.objects.count()
    for value in ("   ", "x" * 61):
        response = owner_client.post(form_url, {"value": value})
        assert response.status_code == 200
        assert "errorlist" in response.content.decode()
    project_fact.refresh_from_db()
    assert project_fact.status == MemoryStatus.ACTIVE
    assert Fact.objects.count() == 1
    assert AuditEvent.objects.count() == baseline


def test_it_refuses_raw_saves_of_memories_and_audit_rows(owner_client, preference):
    change = owner_client.post(admin_url(Fact, "change", preference.pk), {"value": "English"})
    assert change.status_code == 403
    event = AuditEvent.objects.first()
    page = owner_client.get(admin_url(AuditEvent, "change", event.pk)).content.decode()
    assert 'name="_save"' not in page
    assert owner_client.post(admin_url(AuditEvent, "change", event.pk), {}).status_code == 403
    assert owner_client.get(admin_url(AuditEvent, "add")).status_code == 403
    preference.refresh_from_db()
    assert preference.value == "简体中文"


def test_it_shows_engine_status_without_the_llm_key(owner_client, fake_llm, everything):
    page = owner_client.get(reverse("engine_status")).content.decode()
    assert "fake-model" in page
    assert "set (never shown)" in page
    assert "sk-test-secret" not in page
    assert "inbox items waiting for flush_inbox" in page


def test_it_keeps_engine_status_behind_the_login(client, django_user_model):
    response = client.get(reverse("engine_status"))
    assert response.status_code == 302
    assert reverse("admin:login") in response.url
    staff = django_user_model.objects.create_user("helper", password=None, is_staff=True)
    client.force_login(staff)
    assert client.get(reverse("engine_status")).status_code == 403


def test_it_shows_a_memorys_history_as_its_audit_trail(owner_client, preference, project_fact):
    post_action(owner_client, Fact, "pin", preference.pk)
    response = owner_client.get(admin_url(Fact, "history", preference.pk), follow=True)
    assert response.status_code == 200
    rows = response.context["cl"].result_list
    assert {(event.action, event.target_id) for event in rows} == {
        ("insert", preference.pk),
        ("pin", preference.pk),
    }


def test_it_shows_a_write_gate_refusal_of_the_edited_value(owner_client, project_fact):
    form_url = reverse("admin:memory_fact_supersede", args=[project_fact.pk])
    response = owner_client.post(form_url, {"value": "要小心"})
    assert response.status_code == 200
    assert "The write gate refused this value" in response.content.decode()
    project_fact.refresh_from_db()
    assert project_fact.status == MemoryStatus.ACTIVE
    assert Fact.objects.get(status=MemoryStatus.REJECTED).value == "要小心"


def test_it_marks_a_thread_explored_through_its_service(owner_client, project_scope):
    thread = thread_write(scope_id=project_scope.pk, content="权限位要不要在解压时保留？")
    baseline = AuditEvent.objects.count()
    post_action(owner_client, Thread, "mark_explored", thread.pk)
    thread.refresh_from_db()
    assert thread.status == ThreadStatus.EXPLORED
    event = AuditEvent.objects.order_by("-id").first()
    assert AuditEvent.objects.count() == baseline + 1
    assert (event.actor, event.action, event.target_type) == ("owner", "update", "thread")


def test_it_shows_an_api_keys_prefix_and_scopes_but_never_its_hash(owner_client, project_scope):
    key = ApiKey.objects.create(
        name="laptop", prefix="tl_abcd", key_hash=ApiKey.hash_secret("tl_abcd_secret")
    )
    key.scopes.add(project_scope)
    for url in (admin_url(ApiKey, "changelist"), admin_url(ApiKey, "change", key.pk)):
        page = owner_client.get(url).content.decode()
        assert "tl_abcd…" in page and "项目·archive-manager" in page
        assert key.key_hash not in page


def test_it_lists_the_last_dream_runs_on_engine_status(owner_client, db):
    DreamRun.objects.create(
        layer="all",
        day=timezone.localdate(),
        status="partial",
        stats={"layers": {"scan": {"status": "ok"}, "combing": {"status": "failed"}}},
        tokens=1234,
        error="combing: LLM answered something that is not the expected JSON",
    )
    page = owner_client.get(reverse("engine_status")).content.decode()
    assert "full DREAM" in page and "partial (an LLM layer failed)" in page
    assert "scan ok · combing failed" in page
    assert "1234" in page


def test_it_offers_lifecycle_buttons_on_a_memorys_page_through_the_service(
    owner_client, preference
):
    change_url = admin_url(Fact, "change", preference.pk)
    expire_url = reverse("admin:memory_fact_lifecycle", args=[preference.pk, "expire"])
    restore_url = reverse("admin:memory_fact_lifecycle", args=[preference.pk, "restore"])
    page = owner_client.get(change_url).content.decode()
    assert expire_url in page and restore_url not in page
    assert owner_client.get(expire_url).status_code == 405
    baseline = AuditEvent.objects.count()
    response = owner_client.post(expire_url)
    assert response.status_code == 302 and response.url == change_url
    assert AuditEvent.objects.count() == baseline + 1
    assert AuditEvent.objects.order_by("-id").first().actor == "owner"
    page = owner_client.get(change_url).content.decode()
    assert restore_url in page and expire_url not in page
    unknown = reverse("admin:memory_fact_lifecycle", args=[preference.pk, "erase"])
    assert owner_client.post(unknown).status_code == 404


def test_it_lists_dream_layers_in_the_order_they_ran():
    from memory.admin.status import layer_outcomes

    stats = {
        "layers": {
            "script": {"status": "ok"},
            "scan": {"status": "ok"},
            "dream": {"status": "skipped"},
        },
        "order": ["scan", "script", "dream"],
    }
    assert layer_outcomes(stats) == "scan ok · script ok · dream skipped"


def test_it_shows_the_supersession_in_the_old_versions_history(owner_client, project_scope):
    original = narrative_write(
        data=NarrativeInput(scope_id=project_scope.pk, gesture="we cache parsed configs in redis")
    )
    successor = memory_update(
        memory=original, changes={"gesture": "we cache parsed configs on disk"}, actor="agent"
    )
    original.refresh_from_db()
    assert original.superseded_by_id == successor.pk

    response = owner_client.get(admin_url(Narrative, "history", original.pk), follow=True)
    assert response.status_code == 200
    rows = {(event.action, event.target_id) for event in response.context["cl"].result_list}
    assert rows == {("insert", original.pk), ("invalidate", successor.pk)}
    page = owner_client.get(admin_url(Narrative, "change", original.pk)).content.decode()
    assert f"edit of narrative #{original.pk}" in page


NEW_PASSWORD = "tide-Line-secret-42"


def account_events(account) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(
            target_type=account._meta.model_name, target_id=account.pk
        ).order_by("id")
    )


def assert_owner_decision(event: AuditEvent, *, action: str, request_id: str = "") -> None:
    assert (event.actor, event.action) == ("owner", action)
    assert "owner panel" in event.reason and event.reason.endswith("by owner")
    if request_id:
        assert event.request_id == request_id
    else:
        assert len(event.request_id) == 32
    assert event.key_id is None


def assert_no_secret(event: AuditEvent, account) -> None:
    written = json.dumps([event.before, event.after, event.reason], ensure_ascii=False)
    assert NEW_PASSWORD not in written
    assert account.password[:20] not in written


def test_it_audits_a_group_the_owner_adds(owner_client):
    view_fact = Permission.objects.get(codename="view_fact")
    response = owner_client.post(
        reverse("admin:auth_group_add"), {"name": "readers", "permissions": [view_fact.pk]}
    )
    assert response.status_code == 302
    group = Group.objects.get(name="readers")
    [event] = account_events(group)
    assert_owner_decision(event, action="insert")
    assert event.before is None
    assert event.after == {"name": "readers", "permissions": [str(view_fact)]}


def test_it_audits_a_user_the_owner_adds_without_the_password(owner_client):
    response = owner_client.post(
        reverse("admin:auth_user_add"),
        {
            "username": "alice",
            "usable_password": "true",
            "password1": NEW_PASSWORD,
            "password2": NEW_PASSWORD,
        },
    )
    assert response.status_code == 302
    alice = User.objects.get(username="alice")
    [event] = account_events(alice)
    assert_owner_decision(event, action="insert")
    assert event.after["username"] == "alice"
    assert event.after["password"] == "changed"
    assert_no_secret(event, alice)


def test_it_audits_ticking_superuser_with_the_callers_request_id(owner_client):
    alice = User.objects.create_user("alice", password=NEW_PASSWORD)
    # Created outside the panel, as the shell would: that decision has its own row.
    before = len(account_events(alice))
    response = owner_client.post(
        reverse("admin:auth_user_change", args=[alice.pk]),
        {
            "username": "alice",
            "is_active": "on",
            "is_superuser": "on",
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        },
        headers={"X-Request-Id": "req-owner-1"},
    )
    assert response.status_code == 302
    alice.refresh_from_db()
    assert alice.is_superuser
    [event] = account_events(alice)[before:]
    assert_owner_decision(event, action="update", request_id="req-owner-1")
    assert (event.before["is_superuser"], event.after["is_superuser"]) == (False, True)
    assert "password" not in event.after
    assert_no_secret(event, alice)


def test_it_audits_a_password_the_owner_sets_on_a_users_page(owner_client):
    alice = User.objects.create_user("alice", password="an-old-password-1")
    before = len(account_events(alice))
    response = owner_client.post(
        reverse("admin:auth_user_password_change", args=[alice.pk]),
        {"usable_password": "true", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )
    assert response.status_code == 302
    alice.refresh_from_db()
    assert alice.check_password(NEW_PASSWORD)
    [event] = account_events(alice)[before:]
    assert_owner_decision(event, action="update")
    assert event.after["password"] == "changed"
    assert_no_secret(event, alice)


def test_it_audits_the_owners_own_password_change_without_the_password(owner, owner_client):
    owner.set_password("an-old-password-1")
    owner.save()
    owner_client.force_login(owner)
    before = len(account_events(owner))
    response = owner_client.post(
        reverse("admin:password_change"),
        {
            "old_password": "an-old-password-1",
            "new_password1": NEW_PASSWORD,
            "new_password2": NEW_PASSWORD,
        },
        headers={"X-Request-Id": "req-own-password"},
    )
    assert response.status_code == 302
    owner.refresh_from_db()
    assert owner.check_password(NEW_PASSWORD)
    [event] = account_events(owner)[before:]
    assert_owner_decision(event, action="update", request_id="req-own-password")
    assert event.after == {"password": "changed"}
    assert_no_secret(event, owner)


def test_it_stamps_a_lifecycle_button_with_the_callers_request_id(owner_client, preference):
    response = owner_client.post(
        reverse("admin:memory_fact_lifecycle", args=[preference.pk, "pin"]),
        headers={"X-Request-Id": "req-pin-1"},
    )

    assert response.status_code == 302
    event = AuditEvent.objects.filter(target_id=preference.pk).latest("pk")
    assert event.actor == "owner" and event.request_id == "req-pin-1"
