import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dream", "0003_derived_rows_clear"),
        ("memory", "0006_audit_key_id"),
    ]

    operations = [
        migrations.AlterField(
            model_name="topiccluster",
            name="term",
            field=models.CharField(max_length=100),
        ),
        migrations.AddField(
            model_name="topiccluster",
            name="scope",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="memory.scope"
            ),
            preserve_default=False,
        ),
        migrations.AddConstraint(
            model_name="topiccluster",
            constraint=models.UniqueConstraint(
                fields=("scope", "term"), name="topic_cluster_scope_term"
            ),
        ),
        migrations.AlterField(
            model_name="embeddingcluster",
            name="index",
            field=models.PositiveIntegerField(),
        ),
        migrations.AddField(
            model_name="embeddingcluster",
            name="scope",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="memory.scope"
            ),
            preserve_default=False,
        ),
        migrations.AlterModelOptions(
            name="embeddingcluster",
            options={"ordering": ["scope_id", "index"]},
        ),
        migrations.AddConstraint(
            model_name="embeddingcluster",
            constraint=models.UniqueConstraint(
                fields=("scope", "index"), name="emb_cluster_scope_index"
            ),
        ),
        migrations.AddField(
            model_name="dreamlease",
            name="host",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.AddField(
            model_name="dreamlease",
            name="pid",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="dreamlease",
            name="process_started",
            field=models.CharField(blank=True, max_length=40),
        ),
        migrations.AddField(
            model_name="dreamlease",
            name="run_id",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="dreamlease",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="dreamrun",
            name="status",
            field=models.CharField(
                choices=[
                    ("running", "running"),
                    ("skipped", "skipped (another run held the lease)"),
                    ("ok", "ok"),
                    ("partial", "partial (an LLM layer failed)"),
                    ("failed", "failed"),
                    ("interrupted", "interrupted"),
                ],
                default="running",
                max_length=16,
            ),
        ),
    ]
