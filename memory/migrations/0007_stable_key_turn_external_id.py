from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0006_audit_key_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="stable_key",
            field=models.CharField(blank=True, editable=False, max_length=200, null=True),
        ),
        migrations.AddField(
            model_name="contextturn",
            name="external_id",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
    ]
