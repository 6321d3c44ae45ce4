"""Fill the new columns for existing rows and resolve what the constraints of 0009 refuse.

Several active rows for one key (or several live successors of one row) are what lost races left
behind: the newest stays current, the others are superseded by it, each with an audit row. A turn
id stored twice in one session keeps its first turn; the copies keep their text and lose the id.
"""

from django.db import migrations
from django.db.models import Count, Min
from django.db.models.fields.json import KT
from django.db.models.functions import Substr
from django.utils import timezone

REASON = "migration 0008: one current row per key; the newest of {count} active rows stays"
CHAIN_REASON = (
    "migration 0008: an edit chain never forks; the newest of {count} edits of #{old} stays"
)


def _supersede(Memory, AuditEvent, *, losers, keeper, reason, now) -> None:
    for loser in losers:
        before = {"status": loser.status}
        Memory.objects.filter(pk=loser.pk).update(
            status="superseded",
            expired_by="superseded",
            valid_to=loser.valid_to or now,
            superseded_by_id=keeper.pk,
            updated_at=now,
        )
        AuditEvent.objects.create(
            occurred_at=now,
            actor="system",
            action="invalidate",
            target_type=loser.memory_type.replace("_", ""),
            target_id=loser.pk,
            target_repr=loser.summary[:300],
            before=before,
            after={"status": "superseded", "superseded_by": keeper.pk},
            reason=reason[:500],
        )


def _newest_first(rows):
    return sorted(rows, key=lambda row: (row.recorded_at, row.pk), reverse=True)


def fill_stable_keys(apps, schema_editor) -> None:
    Memory = apps.get_model("memory", "Memory")
    Fact = apps.get_model("memory", "Fact")
    SelfConcept = apps.get_model("memory", "SelfConcept")
    AuditEvent = apps.get_model("memory", "AuditEvent")
    now = timezone.now()
    memory = Memory._meta.db_table
    fact = Fact._meta.db_table
    self_concept = SelfConcept._meta.db_table
    # One statement per kind; `||` concatenates (and casts the ids) on SQLite and PostgreSQL alike.
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {memory} SET stable_key = (SELECT 'fact:' || {memory}.scope_id || ':' || "
            f"{fact}.profile_id || ':' || {fact}.predicate FROM {fact} "
            f"WHERE {fact}.memory_ptr_id = {memory}.id) WHERE memory_type = 'fact'"
        )
        cursor.execute(
            f"UPDATE {memory} SET stable_key = (SELECT 'self_concept:' || {self_concept}.field "
            f"FROM {self_concept} WHERE {self_concept}.memory_ptr_id = {memory}.id) "
            "WHERE memory_type = 'self_concept'"
        )

    by_key: dict[str, list] = {}
    for row in Memory.objects.filter(status="active", stable_key__isnull=False):
        by_key.setdefault(row.stable_key, []).append(row)
    for rows in by_key.values():
        if len(rows) > 1:
            keeper, *losers = _newest_first(rows)
            _supersede(
                Memory,
                AuditEvent,
                losers=losers,
                keeper=keeper,
                reason=REASON.format(count=len(rows)),
                now=now,
            )

    by_original: dict[int, list] = {}
    for row in Memory.objects.filter(
        status__in=["active", "candidate"], supersedes_id__isnull=False
    ):
        by_original.setdefault(row.supersedes_id, []).append(row)
    for old, rows in by_original.items():
        if len(rows) > 1:
            keeper, *losers = _newest_first(rows)
            _supersede(
                Memory,
                AuditEvent,
                losers=losers,
                keeper=keeper,
                reason=CHAIN_REASON.format(count=len(rows), old=old),
                now=now,
            )


def fill_turn_external_ids(apps, schema_editor) -> None:
    ContextTurn = apps.get_model("memory", "ContextTurn")
    ContextTurn.objects.filter(meta__has_key="external_id").update(
        external_id=Substr(KT("meta__external_id"), 1, 200)
    )
    ContextTurn.objects.filter(external_id="").update(external_id=None)
    twice = (
        ContextTurn.objects.filter(external_id__isnull=False)
        .values("session_id", "external_id")
        .annotate(copies=Count("id"), first=Min("seq"))
        .filter(copies__gt=1)
    )
    for group in twice:
        ContextTurn.objects.filter(
            session_id=group["session_id"], external_id=group["external_id"], seq__gt=group["first"]
        ).update(external_id=None)


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0007_stable_key_turn_external_id"),
    ]

    operations = [
        migrations.RunPython(fill_stable_keys, migrations.RunPython.noop),
        migrations.RunPython(fill_turn_external_ids, migrations.RunPython.noop),
    ]
