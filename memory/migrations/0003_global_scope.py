from django.db import migrations


def create_global_scope(apps, schema_editor):
    Scope = apps.get_model("memory", "Scope")
    Scope.objects.get_or_create(kind="global", key="global", defaults={"label": "全局"})


class Migration(migrations.Migration):
    dependencies = [("memory", "0002_delete_guard")]

    operations = [migrations.RunPython(create_global_scope, migrations.RunPython.noop)]
