"""Event time on a fact's key: a value dated before the current one is history, not a change,
and no row ever ends before it began (valid_to >= valid_from), whatever ends it."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from memory.models import Actor, AuditEvent, Fact, MemoryStatus, SelfConcept
from memory.search import memory_search
from memory.selectors.reads import memories_page
from memory.selectors.visibility import OWNER
from memory.services.edits import memory_update
from memory.services.errors import InvalidInput
from memory.services.facts import facts_as_of
from memory.services.lifecycle import memory_expire
from memory.services.maintenance import lifecycle_maintain
from memory.services.self_concept import self_concept_write
from tests.memory.conftest import archive_fact, lives_in, narrate

IN_BERLIN = datetime(2019, 1, 1, tzinfo=UTC)
IN_LISBON = datetime(2023, 3, 1, tzinfo=UTC)
IN_PORTO = datetime(2024, 6, 1, tzinfo=UTC)


def stored_ahead(fact, ahead):
    """A fact dated ahead, as releases before future-dated facts were refused stored it."""
    Fact.objects.filter(pk=fact.pk).update(valid_from=ahead, expires_at=None)
    fact.refresh_from_db()
    return fact


def active_values(scope):
    return list(
        Fact.objects.filter(scope=scope, predicate="lives_in", status=MemoryStatus.ACTIVE)
        .order_by("pk")
        .values_list("value", flat=True)
    )


def test_it_records_an_older_value_as_history_and_keeps_the_current_one(global_scope):
    lisbon = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON)

    berlin = lives_in(global_scope, "Berlin", valid_from=IN_BERLIN)

    lisbon.refresh_from_db()
    assert (lisbon.status, lisbon.valid_to, lisbon.superseded_by_id) == ("active", None, None)
    assert (berlin.status, berlin.expired_by) == ("superseded", "superseded")
    assert (berlin.valid_from, berlin.valid_to) == (IN_BERLIN, IN_LISBON)
    assert (berlin.superseded_by_id, berlin.supersedes_id) == (lisbon.pk, None)
    assert active_values(global_scope) == ["Lisbon"]
    event = AuditEvent.objects.get(target_type="fact", target_id=berlin.pk)
    assert event.action == "insert"
    assert event.reason.startswith("lives_in recorded as history")
    assert event.after["statuses"] == {str(berlin.pk): "superseded"}


def test_it_lets_a_backdated_value_replace_the_current_one_only_when_dated_after_it(
    global_scope,
):
    lisbon = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON)
    berlin = lives_in(global_scope, "Berlin", valid_from=IN_BERLIN)

    porto = lives_in(global_scope, "Porto", valid_from=IN_PORTO)

    lisbon.refresh_from_db()
    berlin.refresh_from_db()
    assert (porto.status, porto.supersedes_id) == ("active", lisbon.pk)
    assert (lisbon.status, lisbon.valid_to, lisbon.superseded_by_id) == (
        "superseded",
        IN_PORTO,
        porto.pk,
    )
    assert (berlin.valid_to, berlin.superseded_by_id) == (IN_LISBON, lisbon.pk)
    assert active_values(global_scope) == ["Porto"]


def test_it_records_a_weak_older_value_as_history_so_repeating_it_promotes_nothing(global_scope):
    """Before, the weak value waited as a candidate and its repetition promoted it over Lisbon."""
    lives_in(global_scope, "Lisbon", valid_from=IN_LISBON)

    first = lives_in(global_scope, "Berlin", valid_from=IN_BERLIN, confidence=0.4)
    second = lives_in(global_scope, "Berlin", valid_from=IN_BERLIN, confidence=0.4)

    assert (first.status, second.status) == ("superseded", "superseded")
    assert active_values(global_scope) == ["Lisbon"]
    assert not Fact.objects.filter(status=MemoryStatus.CANDIDATE).exists()


def test_it_finds_backdated_history_in_reads_of_the_past_but_never_as_current(
    global_scope, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        lisbon = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON)
        berlin = lives_in(global_scope, "Berlin", valid_from=IN_BERLIN)
    scopes = [global_scope.pk]

    then = memory_search(query="Berlin", scope_ids=scopes, as_of=datetime(2020, 6, 1, tzinfo=UTC))
    now = memory_search(query="Berlin", scope_ids=scopes)

    assert berlin.pk in [hit.memory.pk for hit in then]
    assert berlin.pk not in [hit.memory.pk for hit in now]
    every = memories_page(principal=OWNER, scope_ids=scopes, status="")
    assert {lisbon.pk, berlin.pk} <= {memory.pk for memory in every}
    current = memories_page(principal=OWNER, scope_ids=scopes)
    assert [memory.pk for memory in current] == [lisbon.pk]
    assert [fact.pk for fact in facts_as_of(scope_ids=scopes)] == [lisbon.pk]


def test_it_edits_the_current_value_after_older_history_was_recorded(global_scope):
    lisbon = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON)
    berlin = lives_in(global_scope, "Berlin", valid_from=IN_BERLIN)

    edited = memory_update(memory=lisbon, changes={"value": "Lisboa"}, actor=Actor.OWNER)

    lisbon.refresh_from_db()
    berlin.refresh_from_db()
    assert (edited.status, edited.supersedes_id, edited.value) == ("active", lisbon.pk, "Lisboa")
    assert (lisbon.status, lisbon.superseded_by_id) == ("superseded", edited.pk)
    assert lisbon.valid_from <= lisbon.valid_to <= edited.valid_from
    assert (berlin.status, berlin.superseded_by_id) == ("superseded", lisbon.pk)
    assert active_values(global_scope) == ["Lisboa"]


def test_it_never_ends_an_edited_fact_before_it_began(global_scope):
    """Before, an edit dated before the row it edits (a row dated ahead edited now, or an edit
    carrying an earlier valid_from) gave that row a valid_to earlier than its valid_from."""
    ahead = timezone.now() + timedelta(days=30)
    tokyo = stored_ahead(lives_in(global_scope, "Tokyo"), ahead)

    osaka = memory_update(memory=tokyo, changes={"value": "Osaka"}, actor=Actor.OWNER)
    kyoto = lives_in(global_scope, "Kyoto", valid_from=IN_BERLIN, supersedes_id=osaka.pk)

    tokyo.refresh_from_db()
    osaka.refresh_from_db()
    assert (tokyo.status, tokyo.valid_from, tokyo.valid_to) == ("superseded", ahead, ahead)
    assert (osaka.status, osaka.superseded_by_id) == ("superseded", kyoto.pk)
    assert osaka.valid_to == osaka.valid_from
    assert active_values(global_scope) == ["Kyoto"]


def test_it_never_ends_a_current_value_dated_ahead_before_it_began_when_promoting(global_scope):
    ahead = timezone.now() + timedelta(days=30)
    tokyo = stored_ahead(lives_in(global_scope, "Tokyo"), ahead)
    lives_in(global_scope, "Osaka", confidence=0.4)

    osaka = lives_in(global_scope, "Osaka", confidence=0.4)

    tokyo.refresh_from_db()
    assert osaka.status == "active"
    assert (tokyo.status, tokyo.valid_to) == ("superseded", ahead)


def test_it_lets_a_writer_blind_to_a_secret_current_value_replace_it_without_inverting_it(
    global_scope,
):
    """A writer that may not read secrets is answered as if none were stored, so its older value
    still supersedes; before, the secret row then ended (2019) before it began (2023)."""
    secret = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON, secret=True)

    berlin = lives_in(global_scope, "Berlin", valid_from=IN_BERLIN)

    secret.refresh_from_db()
    assert (berlin.status, berlin.supersedes_id, berlin.secret) == ("active", secret.pk, False)
    assert (secret.status, secret.valid_to) == ("superseded", IN_LISBON)


def test_it_keeps_secret_the_older_history_of_a_secret_key(global_scope):
    secret = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON, secret=True)

    berlin = lives_in(global_scope, "Berlin", valid_from=IN_BERLIN, writer_sees_secrets=True)

    secret.refresh_from_db()
    assert (berlin.status, berlin.secret, berlin.superseded_by_id) == (
        "superseded",
        True,
        secret.pk,
    )
    assert (secret.status, secret.valid_to) == ("active", None)


def test_it_never_ends_an_expired_fact_dated_ahead_before_it_began(global_scope):
    ahead = timezone.now() + timedelta(days=30)
    tokyo = stored_ahead(lives_in(global_scope, "Tokyo"), ahead)

    expired = memory_expire(memory_id=tokyo.pk, reason="owner: not moving after all")

    assert (expired.status, expired.valid_to) == ("expired", ahead)


def test_it_never_ends_a_decayed_fact_dated_ahead_before_it_began(project_scope):
    ahead = timezone.now() + timedelta(days=30)
    fact = stored_ahead(
        archive_fact(project_scope, "release_date", "next month", importance=1), ahead
    )

    lifecycle_maintain(now=timezone.now() + timedelta(days=8))

    fact.refresh_from_db()
    assert (fact.status, fact.expired_by, fact.valid_to) == ("expired", "decay", ahead)


def test_it_never_ends_an_edited_narrative_dated_ahead_before_it_began(project_scope):
    ahead = timezone.now() + timedelta(days=30)
    offsite = narrate(project_scope, "The team offsite happens in Porto", valid_from=ahead)

    edited = memory_update(
        memory=offsite, changes={"gesture": "The team offsite happens in Braga"}, actor=Actor.OWNER
    )

    offsite.refresh_from_db()
    assert (edited.status, edited.valid_from) == ("active", ahead)
    assert (offsite.status, offsite.valid_to) == ("superseded", ahead)


def test_it_never_ends_a_self_concept_dated_ahead_before_it_began(db):
    """A clock stepped back (NTP, a restored VM) leaves the current version dated after now:
    found in review, its next version failed with the database's interval check."""
    first = self_concept_write(field="self_reflection", content="I am the billing agent")
    ahead = timezone.now() + timedelta(minutes=5)
    SelfConcept.objects.filter(pk=first.pk).update(valid_from=ahead)

    second = self_concept_write(field="self_reflection", content="I am the ledger agent")

    first.refresh_from_db()
    assert (first.status, first.valid_to, second.status) == ("superseded", ahead, "active")


def test_it_refuses_a_fact_dated_ahead_and_one_that_expires_before_it_begins(global_scope):
    """Before, "on call: Bob from next March" replaced Alice at once while Bob was not yet on
    call: session start said Bob, and a search for who is on call found neither."""
    alice = lives_in(global_scope, "Lisbon")

    for extra, field in [
        ({"valid_from": timezone.now() + timedelta(days=90)}, "valid_from"),
        ({"valid_from": IN_LISBON, "expires_at": IN_BERLIN}, "expires_at"),
    ]:
        with pytest.raises(InvalidInput) as refused:
            lives_in(global_scope, "Porto", **extra)
        assert refused.value.field == field

    assert lives_in(global_scope, "Porto", valid_from=timezone.now() + timedelta(minutes=1)).value
    alice.refresh_from_db()
    assert alice.status == "superseded"
