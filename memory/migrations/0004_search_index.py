from django.db import migrations

from memory.search.schema import search_schema_sql


def install(apps, schema_editor):
    for statement in search_schema_sql(schema_editor.connection.vendor, install=True):
        schema_editor.execute(statement)


def remove(apps, schema_editor):
    for statement in search_schema_sql(schema_editor.connection.vendor, install=False):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_global_scope")]

    operations = [migrations.RunPython(install, remove)]
