from django.db import migrations

from memory.services.maintenance import intervals_repair

# Releases before this one stored a fact that ended before it began when a fact dated before the
# key's current value replaced it; each such row now ends where it begins (audited).


def repair(apps, schema_editor) -> None:
    intervals_repair()


class Migration(migrations.Migration):
    dependencies = [("memory", "0022_memory_pinned_scope")]

    operations = [migrations.RunPython(repair, migrations.RunPython.noop)]
