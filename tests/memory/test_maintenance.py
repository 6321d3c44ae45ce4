from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import AuditEvent, FactKind, Memory, MemoryStatus
from memory.services.edits import memory_update
from memory.services.errors import InvalidInput
from memory.services.facts import FactInput, fact_write
from memory.services.lifecycle import memory_expire
from memory.services.maintenance import lifecycle_maintain
from tests.memory.conftest import narrate


def write(scope, predicate, value):
    return fact_write(
        data=FactInput(
            scope_id=scope.pk,
            profile_name="用户",
            profile_kind="user",
            kind=FactKind.FACT,
            predicate=predicate,
            value=value,
        )
    )


def test_it_keeps_a_memory_whose_dependency_was_edited(global_scope):
    shell = write(global_scope, "shell", "zsh")
    prompt = narrate(
        global_scope, "The user styled the zsh prompt in teal", depends_on=[f"memory:{shell.pk}"]
    )
    memory_update(memory=shell, changes={"value": "zsh 5.9"}, actor="agent")

    report = lifecycle_maintain()

    assert report.planned == []
    assert Memory.objects.get(pk=prompt.pk).status == MemoryStatus.ACTIVE


def test_it_keeps_a_memory_whose_dependency_was_edited_twice(global_scope):
    trip = narrate(global_scope, "The user planned a trip to Porto", tags=["travel"])
    packing = narrate(
        global_scope, "The user packed for the Porto trip", depends_on=[f"memory:{trip.pk}"]
    )
    second = memory_update(memory=trip, changes={"tags": ["travel", "porto"]}, actor="agent")
    memory_update(memory=second, changes={"tags": ["porto"]}, actor="agent")

    report = lifecycle_maintain()

    assert report.planned == []
    assert Memory.objects.get(pk=packing.pk).status == MemoryStatus.ACTIVE


def test_it_expires_a_memory_whose_dependency_chain_ends_in_an_expired_memory(global_scope):
    shell = write(global_scope, "shell", "zsh")
    prompt = narrate(
        global_scope, "The user styled the zsh prompt in teal", depends_on=[f"memory:{shell.pk}"]
    )
    current = memory_update(memory=shell, changes={"value": "zsh 5.9"}, actor="agent")
    memory_expire(memory_id=current.pk, reason="switched to fish")

    report = lifecycle_maintain()

    assert [item.memory_id for item in report.planned] == [prompt.pk]
    prompt.refresh_from_db()
    assert (prompt.status, prompt.expired_by) == (MemoryStatus.EXPIRED, "scope-gone")


def test_it_refuses_an_edit_that_makes_a_memory_depend_on_itself(global_scope):
    lisbon = narrate(global_scope, "The user lives in Lisbon")
    gym = narrate(global_scope, "The user's gym is near Rossio", depends_on=[f"memory:{lisbon.pk}"])
    rows = Memory.objects.count()

    with pytest.raises(InvalidInput) as refused:
        memory_update(
            memory=gym,
            changes={"gesture": "The user's gym is by Rossio", "depends_on": [f"memory:{gym.pk}"]},
            actor="agent",
        )

    assert refused.value.field == "depends_on"
    assert f"memory:{gym.pk}" in str(refused.value)
    assert Memory.objects.count() == rows
    edited = memory_update(
        memory=gym, changes={"gesture": "The user's gym is by Rossio"}, actor="agent"
    )
    assert edited.depends_on == [f"memory:{lisbon.pk}"]


def test_it_stamps_one_request_id_on_every_expiry_of_a_maintain_run(global_scope):
    for gesture in ("The user went kayaking", "The user went sailing", "The user went rowing"):
        narrate(global_scope, gesture, importance=3)

    first = lifecycle_maintain(now=timezone.now() + timedelta(days=15))

    expiries = AuditEvent.objects.filter(action="expire")
    assert first.expired == expiries.count() == 3
    assert set(expiries.values_list("request_id", flat=True)) == {first.request_id}
    assert first.request_id
    narrate(global_scope, "The user went swimming", importance=3)
    second = lifecycle_maintain(now=timezone.now() + timedelta(days=15))
    assert second.expired == 1 and second.request_id != first.request_id
