"""Topic and soft clusters were built over the whole store, so a cluster can mix several scopes'
memories and be named from any of them. They are derived rows: clear them here, and the next script
layer run rebuilds them per scope (0004 makes the scope part of each cluster)."""

from django.db import migrations


def clusters_clear(apps, schema_editor) -> None:
    for name in (
        "EmbeddingClusterAdjacency",
        "EmbeddingClusterMember",
        "EmbeddingCluster",
        "TopicClusterMember",
        "TopicCluster",
    ):
        apps.get_model("dream", name).objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("dream", "0002_narrative_keywords")]

    operations = [migrations.RunPython(clusters_clear, migrations.RunPython.noop)]
