from django.db import migrations

from memory.search.postgres import native_pending_xact_sql


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in native_pending_xact_sql(install=True):
            schema_editor.execute(statement)


def remove(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in native_pending_xact_sql(install=False):
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("memory", "0011_search_postgres_native")]

    operations = [migrations.RunPython(install, remove)]
