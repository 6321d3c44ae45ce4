from django.db import migrations

from memory.search.postgres import native_pending_xact_sql, native_sql_migration


class Migration(migrations.Migration):
    dependencies = [("memory", "0011_search_postgres_native")]

    operations = [native_sql_migration(native_pending_xact_sql)]
