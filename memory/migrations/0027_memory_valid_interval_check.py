from django.db import migrations, models

from memory.db_guard import triggers_kept
from memory.services.maintenance import intervals_repair

# The database now refuses a memory that ends before it begins (valid_to < valid_from). Rows
# written so since migration 0023 repaired them (by raw SQL, or a process of an older release
# still running) are repaired the same way first, audited, so adding the constraint never fails.

MEMORY_TABLE = "memory_memory"


def repair(apps, schema_editor) -> None:
    intervals_repair()


class AddConstraintKeepingTriggers(migrations.AddConstraint):
    """On SQLite the constraint is added by rebuilding memory_memory, which drops its triggers:
    the no-delete guard and the search index's. They are put back exactly as they were."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state) -> None:
        with triggers_kept(schema_editor, table=MEMORY_TABLE):
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state) -> None:
        with triggers_kept(schema_editor, table=MEMORY_TABLE):
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    dependencies = [("memory", "0026_search_terms_emoji_and_kana")]

    operations = [
        migrations.RunPython(repair, migrations.RunPython.noop),
        AddConstraintKeepingTriggers(
            model_name="memory",
            constraint=models.CheckConstraint(
                condition=models.Q(("valid_to__isnull", True))
                | models.Q(("valid_to__gte", models.F("valid_from"))),
                name="memory_valid_interval",
            ),
        ),
    ]
