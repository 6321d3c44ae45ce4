from django.db import migrations

from memory.search.schema import MEMORY_WATCHED, memory_watch_sql

# Before this migration a change of `secret` alone was not logged, so each process's search index
# kept a memory's old flag until it restarted: one the owner made no longer secret stayed hidden
# from every caller that may not see secrets.
WATCHED_BEFORE = (
    "scope_id, status, valid_from, valid_to, pinned, importance, recorded_at, "
    "search_text, embedding, embedding_model, memory_type"
)


def watch_secret(apps, schema_editor):
    for statement in memory_watch_sql(schema_editor.connection.vendor, MEMORY_WATCHED):
        schema_editor.execute(statement)


def unwatch_secret(apps, schema_editor):
    for statement in memory_watch_sql(schema_editor.connection.vendor, WATCHED_BEFORE):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("memory", "0017_search_terms_months")]

    operations = [migrations.RunPython(watch_secret, unwatch_secret)]
