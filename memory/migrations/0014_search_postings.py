from django.db import migrations

from memory.search.postgres import native_postings_sql, native_sql_migration


class Migration(migrations.Migration):
    dependencies = [("memory", "0013_memory_scope_type_recent")]

    operations = [native_sql_migration(native_postings_sql)]
