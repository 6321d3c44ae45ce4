from django.db import migrations

from memory.search.maintenance import search_terms_redraw

# Chinese and Japanese months (2024年1月, 十二月), Spanish months ("7 de enero") and year-first
# dates (2024/01/07) now also index as the English month words a turn's date terms use.


class Migration(migrations.Migration):
    atomic = False  # the PostgreSQL-native repair commits in short transactions of its own

    dependencies = [("memory", "0016_search_terms_irregular_forms")]

    operations = [migrations.RunPython(search_terms_redraw, migrations.RunPython.noop)]
