from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import AuditEvent, Memory, MemoryStatus
from memory.services.errors import Conflict
from memory.services.lifecycle import memory_expire, memory_restore
from memory.services.maintenance import lifecycle_maintain
from tests.memory.conftest import archive_fact, narrate


def planned_ids(**extra) -> list[int]:
    return [item.memory_id for item in lifecycle_maintain(dry_run=True, **extra).planned]


def restore_audit(memory) -> AuditEvent:
    return AuditEvent.objects.get(action="restore", target_id=memory.pk)


def test_it_keeps_a_memory_restored_after_its_ttl_ended_through_the_next_maintain(project_scope):
    storage = archive_fact(project_scope, "storage", "SQLite")
    ended = timezone.now() - timedelta(hours=1)
    Memory.objects.filter(pk=storage.pk).update(expires_at=ended)
    lifecycle_maintain()
    storage.refresh_from_db()
    assert (storage.status, storage.expired_by) == (MemoryStatus.EXPIRED, "ttl")

    memory_restore(memory_id=storage.pk, reason="owner: still true")

    assert storage.pk not in planned_ids()
    storage.refresh_from_db()
    assert storage.status == MemoryStatus.ACTIVE and storage.expires_at is None
    event = restore_audit(storage)
    assert event.before["expires_at"] == ended.isoformat()
    assert event.after["expires_at"] is None


def test_it_drops_the_dependencies_that_ended_a_memory_when_it_is_restored(global_scope, tmp_path):
    kept_dir = tmp_path / "kept"
    gone_dir = tmp_path / "gone"
    kept_dir.mkdir()
    gone_dir.mkdir()
    base = narrate(global_scope, "The user lives in Lisbon")
    child = narrate(
        global_scope,
        "The user's gym is near Lisbon's Rossio",
        depends_on=[f"memory:{base.pk}", f"path:{gone_dir}", f"path:{kept_dir}"],
    )
    memory_expire(memory_id=base.pk, reason="moved to Porto")
    gone_dir.rmdir()
    lifecycle_maintain()
    child.refresh_from_db()
    assert (child.status, child.expired_by) == (MemoryStatus.EXPIRED, "scope-gone")

    memory_restore(memory_id=child.pk)

    assert child.pk not in planned_ids()
    child.refresh_from_db()
    assert child.status == MemoryStatus.ACTIVE
    assert child.depends_on == [f"path:{kept_dir}"]
    event = restore_audit(child)
    assert event.before["depends_on"] == [
        f"memory:{base.pk}",
        f"path:{gone_dir}",
        f"path:{kept_dir}",
    ]
    assert event.after["depends_on_dropped"] == {
        f"memory:{base.pk}": f"memory #{base.pk} it depends on is gone",
        f"path:{gone_dir}": f"{gone_dir} no longer exists",
    }


def test_it_restarts_the_decay_clock_of_a_restored_memory(global_scope):
    kayak = narrate(global_scope, "The user went kayaking on the Tagus", importance=3)
    Memory.objects.filter(pk=kayak.pk).update(recorded_at=timezone.now() - timedelta(days=20))
    lifecycle_maintain()
    kayak.refresh_from_db()
    assert (kayak.status, kayak.expired_by) == (MemoryStatus.EXPIRED, "decay")

    memory_restore(memory_id=kayak.pk)

    assert kayak.pk not in planned_ids()
    # A restore is not a pin: left unrecalled past importance 3's 14 days, it fades again.
    assert kayak.pk in planned_ids(now=timezone.now() + timedelta(days=15))
    assert restore_audit(kayak).before["last_activated"] is None


def test_it_refuses_to_expire_a_memory_superseded_by_a_secret_without_naming_it(project_scope):
    plain = archive_fact(project_scope, "door_code", "1234")
    secret = archive_fact(project_scope, "door_code", "4821", secret=True)

    with pytest.raises(Conflict) as refused:
        memory_expire(memory_id=plain.pk, actor="agent")

    message = str(refused.value)
    assert f"memory #{plain.pk} is already superseded" in message
    assert f"#{secret.pk}" not in message and "4821" not in message
    assert Memory.objects.get(pk=plain.pk).status == MemoryStatus.SUPERSEDED
