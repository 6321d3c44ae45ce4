from django.db import migrations

from memory.search.postgres import native_postings_sql


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in native_postings_sql(install=True):
            schema_editor.execute(statement)


def remove(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in native_postings_sql(install=False):
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("memory", "0013_memory_scope_type_recent")]

    operations = [migrations.RunPython(install, remove)]
