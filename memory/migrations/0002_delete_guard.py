from django.db import migrations

from memory.db_guard import guard_install_sql, guard_remove_sql

# Frozen here: a later migration that protects more tables names them itself.
PROTECTED = (
    "memory_memory",
    "memory_narrative",
    "memory_narrativetag",
    "memory_fact",
    "memory_selfconcept",
    "memory_contextturn",
    "memory_evidence",
    "memory_auditevent",
)
APPEND_ONLY = ("memory_auditevent",)


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for statement in guard_install_sql(vendor, protected=PROTECTED, append_only=APPEND_ONLY):
        schema_editor.execute(statement)


def remove(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for statement in guard_remove_sql(vendor, protected=PROTECTED, append_only=APPEND_ONLY):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [migrations.RunPython(install, remove)]
