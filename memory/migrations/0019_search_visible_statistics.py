from django.db import migrations, models

from memory.search.postgres import native_speakers_scope, native_speakers_unscope


class Migration(migrations.Migration):
    dependencies = [("memory", "0018_search_watch_secret")]

    operations = [
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(
                condition=models.Q(("secret", True)),
                fields=["scope"],
                name="memory_secret_scope",
            ),
        ),
        migrations.RunPython(native_speakers_scope, native_speakers_unscope),
    ]
