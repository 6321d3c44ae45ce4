from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0008_fill_stable_keys"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="memory",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "active")),
                fields=("stable_key",),
                name="memory_one_active_per_key",
            ),
        ),
        migrations.AddConstraint(
            model_name="memory",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status__in", ["active", "candidate"])),
                fields=("supersedes",),
                name="memory_one_live_successor",
            ),
        ),
        migrations.AddConstraint(
            model_name="contextturn",
            constraint=models.UniqueConstraint(
                condition=models.Q(("external_id__isnull", False)),
                fields=("session", "external_id"),
                name="turn_session_external_unique",
            ),
        ),
    ]
