from django.db import migrations

from memory.search.maintenance import search_terms_redraw

# A Chinese word jieba does not know (a name, mostly) is now also indexed as its character pairs,
# so the same name cut differently in two sentences ("林雨桐", "带林雨桐"), or given alone ("雨桐"),
# still meets it.


class Migration(migrations.Migration):
    atomic = False  # the PostgreSQL-native repair commits in short transactions of its own

    dependencies = [("memory", "0023_memory_intervals_repair")]

    operations = [migrations.RunPython(search_terms_redraw, migrations.RunPython.noop)]
