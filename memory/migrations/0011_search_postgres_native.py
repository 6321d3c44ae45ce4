from django.db import migrations

from memory.search.postgres import native_schema_install, native_schema_remove


def install(apps, schema_editor):
    native_schema_install(schema_editor)


def remove(apps, schema_editor):
    native_schema_remove(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("memory", "0010_inbox_turn")]

    operations = [migrations.RunPython(install, remove)]
