from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from memory.models import AuditEvent, Evidence, Fact, FactKind, MemoryStatus, Narrative
from memory.services.consolidation import memories_as_of
from memory.services.facts import FactInput, fact_write, facts_as_of
from memory.services.lifecycle import memory_expire, memory_set_pinned
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.lifecycle.conftest import replay_statuses, stored_statuses


def status_fact(scope, value, *, writer_sees_secrets=False, **extra):
    return fact_write(
        data=FactInput(
            scope_id=scope.pk,
            profile_name="archive-manager",
            profile_kind="project",
            kind=FactKind.FACT,
            predicate="security_status",
            value=value,
            **extra,
        ),
        writer_sees_secrets=writer_sees_secrets,
    )


def narrate(scope, gesture, **extra):
    return narrative_write(data=NarrativeInput(scope_id=scope.pk, gesture=gesture, **extra))


def turns(scope, *texts):
    session = session_start(
        runtime="test", external_id=f"s-{scope.pk}-{len(texts)}-{texts[0][:8]}", scope_id=scope.pk
    )
    rows = turns_record(
        session_id=session.pk, turns=[TurnInput(role="user", content=text) for text in texts]
    )
    return [row.pk for row in rows]


def test_it_supersedes_a_status_and_answers_as_of_before_the_change(project_scope):
    old = status_fact(project_scope, "has_vulnerabilities")
    between = timezone.now()
    new = status_fact(project_scope, "fixed")
    old.refresh_from_db()

    active = Fact.objects.filter(predicate="security_status", status=MemoryStatus.ACTIVE)
    assert list(active.values_list("pk", flat=True)) == [new.pk]
    assert old.status == MemoryStatus.SUPERSEDED and old.expired_by == "superseded"
    assert old.valid_to == new.valid_from and old.superseded_by_id == new.pk

    scopes = [project_scope.pk]
    assert [f.value for f in facts_as_of(scope_ids=scopes, predicate="security_status")] == [
        "fixed"
    ]
    then = facts_as_of(scope_ids=scopes, as_of=between, predicate="security_status")
    assert [f.value for f in then] == ["has_vulnerabilities"]
    assert list(memories_as_of(scope_ids=scopes, as_of=between).values_list("pk", flat=True)) == [
        old.pk
    ]
    before_anything = old.recorded_at - timezone.timedelta(seconds=1)
    assert not facts_as_of(scope_ids=scopes, as_of=before_anything).exists()

    def context(*extra):
        out = StringIO()
        call_command(
            "context",
            "--query",
            "security status",
            "--scope",
            str(project_scope.pk),
            *extra,
            stdout=out,
        )
        return out.getvalue()

    assert "fixed" in context() and "has_vulnerabilities" not in context()
    then_out = context("--as-of", between.isoformat())
    assert "has_vulnerabilities" in then_out and ": fixed" not in then_out


def test_it_never_finds_the_old_row_under_a_different_key(project_scope):
    old = status_fact(project_scope, "has_vulnerabilities")
    fact_write(
        data=FactInput(
            scope_id=project_scope.pk,
            profile_name="archive-manager",
            profile_kind="project",
            kind=FactKind.FACT,
            predicate="security_review_findings",
            value="path traversal fixed",
        )
    )
    old.refresh_from_db()
    assert old.status == MemoryStatus.ACTIVE  # seed 003: only a stable key can update a status


def test_it_merges_identical_text_and_keeps_the_incoming_evidence(project_scope):
    first_turns = turns(project_scope, "archive-manager 用 SQLite 存储索引")
    second_turns = turns(project_scope, "对，archive-manager 是用 SQLite 存索引的")
    first = narrate(
        project_scope, "archive-manager 用 SQLite 存储索引", source_turn_ids=first_turns
    )
    again = narrate(
        project_scope, "archive-manager 用 SQLite 存储索引。", source_turn_ids=second_turns
    )
    assert again.pk == first.pk
    assert Narrative.objects.count() == 1
    assert set(Evidence.objects.filter(memory=first).values_list("turn_id", flat=True)) == set(
        first_turns + second_turns
    )
    merge = AuditEvent.objects.get(action="merge")
    assert merge.after["how"] == "identical-text"
    assert merge.after["incoming"]["gesture"] == "archive-manager 用 SQLite 存储索引。"


def test_it_merges_a_near_duplicate_by_embedding_similarity(
    project_scope, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):  # the stored row's embedding
        first = narrate(project_scope, "The user prefers dark mode")
    again = narrate(project_scope, "User prefers dark mode")
    assert again.pk == first.pk
    merge = AuditEvent.objects.get(action="merge")
    assert merge.after["how"] == "embedding" and merge.after["similarity"] >= 0.93


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("archive-manager 有路径穿越漏洞", "archive-manager 的路径穿越漏洞已修复"),
        ("The staging server listens on port 8000", "The staging server listens on port 8001"),
        ("The user likes the archive-manager UI", "The user does not like the archive-manager UI"),
    ],
)
def test_it_keeps_close_but_different_statements_apart(project_scope, first, second):
    one = narrate(project_scope, first)
    two = narrate(project_scope, second)
    assert one.pk != two.pk
    assert Narrative.objects.filter(status=MemoryStatus.ACTIVE).count() == 2


def test_it_never_merges_into_a_pinned_memory(project_scope):
    pinned = narrate(project_scope, "archive-manager releases are signed with Authenticode")
    memory_set_pinned(memory_id=pinned.pk, pinned=True)
    again = narrate(project_scope, "archive-manager releases are signed with Authenticode")
    assert again.pk != pinned.pk
    pinned.refresh_from_db()
    assert pinned.confidence == 1.0


def test_it_does_not_merge_across_scopes(project_scope, other_project_scope):
    one = narrate(project_scope, "Deploys go through the staging cluster first")
    two = narrate(other_project_scope, "Deploys go through the staging cluster first")
    assert one.pk != two.pk


def test_it_merges_a_narrative_only_into_one_of_its_own_secrecy(project_scope):
    secret = narrate(project_scope, "The spare key is under the blue flowerpot", secret=True)
    plain = narrate(project_scope, "The spare key is under the blue flowerpot")
    assert plain.pk != secret.pk and not plain.secret
    public = narrate(project_scope, "Deploys go through the staging cluster first")
    hidden = narrate(project_scope, "Deploys go through the staging cluster first", secret=True)
    assert hidden.pk != public.pk
    public.refresh_from_db()
    assert not public.secret  # a secret write never hides what agents already read


def test_it_merges_a_secret_only_for_a_writer_who_may_read_secrets(project_scope):
    """A merge answers with the stored secret: its id, its confidence, its other fields."""
    stored = narrate(project_scope, "The vault code is in the red notebook", secret=True)
    again = narrate(project_scope, "The vault code is in the red notebook", secret=True)
    assert again.pk != stored.pk
    owners = narrative_write(
        data=NarrativeInput(
            scope_id=project_scope.pk, gesture="The vault code is in the red notebook", secret=True
        ),
        writer_sees_secrets=True,
    )
    assert owners.pk == again.pk
    assert AuditEvent.objects.filter(action="merge", target_id=again.pk).count() == 1


def test_it_replaces_a_secret_value_it_may_not_read_instead_of_confirming_it(project_scope):
    """ "Same value already current" would confirm a guessed secret: the writer is answered as if
    no secret were stored, and the owner's audit row still says what was replaced."""
    secret = status_fact(project_scope, "pin 4821", secret=True)
    guess = status_fact(project_scope, "pin 4821")
    assert guess.pk != secret.pk and not guess.secret
    secret.refresh_from_db()
    assert secret.status == MemoryStatus.SUPERSEDED and secret.superseded_by_id == guess.pk
    event = AuditEvent.objects.get(target_id=guess.pk)
    assert event.action == "invalidate" and event.before["id"] == secret.pk
    assert "#" not in event.reason
    restated = status_fact(project_scope, "pin 4821", secret=True)
    again = status_fact(project_scope, "pin 4821", writer_sees_secrets=True)
    assert again.pk == restated.pk
    assert AuditEvent.objects.filter(target_id=restated.pk).latest("pk").action == "skip"


def test_it_never_promotes_a_secret_candidate_for_a_writer_who_may_not_read_it(project_scope):
    weak = status_fact(project_scope, "maybe pwned", confidence=0.3, secret=True)
    again = status_fact(project_scope, "maybe pwned", confidence=0.3)
    assert again.pk != weak.pk
    weak.refresh_from_db()
    assert weak.status == MemoryStatus.CANDIDATE and weak.confidence == pytest.approx(0.3)


def test_it_promotes_a_weak_candidate_when_it_is_repeated(project_scope):
    weak = narrate(project_scope, "archive-manager might move to Rust", confidence=0.3)
    assert weak.status == MemoryStatus.CANDIDATE
    again = narrate(project_scope, "archive-manager might move to Rust", confidence=0.3)
    weak.refresh_from_db()
    assert again.pk == weak.pk
    assert weak.confidence == pytest.approx(0.51)  # 1 - 0.7 × 0.7: two weak sightings
    assert weak.status == MemoryStatus.ACTIVE
    assert AuditEvent.objects.filter(action="promote", target_id=weak.pk).count() == 1


def test_it_keeps_a_single_weak_sighting_in_the_candidate_pool(project_scope):
    weak = narrate(project_scope, "archive-manager might move to Rust", confidence=0.2)
    again = narrate(project_scope, "archive-manager might move to Rust", confidence=0.2)
    weak.refresh_from_db()
    assert again.pk == weak.pk and weak.status == MemoryStatus.CANDIDATE
    assert weak.confidence == pytest.approx(0.36)


def test_it_promotes_a_fact_candidate_when_stronger_evidence_arrives(project_scope):
    current = status_fact(project_scope, "has_vulnerabilities")
    rumour = status_fact(project_scope, "fixed", confidence=0.3)
    current.refresh_from_db()
    assert rumour.status == MemoryStatus.CANDIDATE and current.status == MemoryStatus.ACTIVE

    confirmed = status_fact(project_scope, "fixed", confidence=0.9)
    assert confirmed.pk == rumour.pk
    rumour.refresh_from_db()
    current.refresh_from_db()
    assert rumour.status == MemoryStatus.ACTIVE and rumour.confidence == pytest.approx(0.93)
    assert current.status == MemoryStatus.SUPERSEDED and current.superseded_by_id == rumour.pk
    assert AuditEvent.objects.filter(action="promote", target_id=rumour.pk).count() == 1


def test_it_replays_the_audit_log_into_the_final_statuses(project_scope, global_scope):
    status_fact(project_scope, "has_vulnerabilities")
    status_fact(project_scope, "fixed")
    status_fact(project_scope, "fixed")
    narrate(project_scope, "当前插件要小心")
    narrate(project_scope, "archive-manager might move to Rust", confidence=0.3)
    narrate(project_scope, "archive-manager might move to Rust", confidence=0.4)
    gone = narrate(global_scope, "The user went to Lisbon in May")
    memory_expire(memory_id=gone.pk, reason="owner: not true")
    narrate(global_scope, "The user prefers dark mode")
    narrate(global_scope, "User prefers dark mode")

    events = AuditEvent.objects.filter(target_type__in=["fact", "narrative", "memory"])
    assert all(event.actor and event.reason for event in events)
    assert replay_statuses() == stored_statuses()


def test_it_supersedes_an_edited_narrative_instead_of_merging_into_it(project_scope):
    original = narrate(project_scope, "archive-manager compresses archives with zstd", importance=2)
    edit = narrate(
        project_scope,
        "archive-manager compresses archives with zstd",
        importance=4,
        supersedes_id=original.pk,
    )
    original.refresh_from_db()
    assert edit.pk != original.pk and edit.supersedes_id == original.pk
    assert original.status == MemoryStatus.SUPERSEDED and original.superseded_by_id == edit.pk
    assert original.valid_to == edit.valid_from
    event = AuditEvent.objects.get(target_type="narrative", target_id=edit.pk)
    assert event.action == "invalidate"
    assert event.after["statuses"] == {str(edit.pk): "active", str(original.pk): "superseded"}


def test_it_refuses_to_supersede_what_is_not_an_active_narrative_in_scope(
    project_scope, other_project_scope
):
    from memory.services.errors import InvalidInput

    elsewhere = narrate(other_project_scope, "billing-service rotates keys monthly")
    with pytest.raises(InvalidInput, match="not an active narrative"):
        narrate(project_scope, "billing rotates keys weekly", supersedes_id=elsewhere.pk)
    assert Narrative.objects.count() == 1
