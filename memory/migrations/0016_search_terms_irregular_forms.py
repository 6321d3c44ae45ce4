from django.db import migrations

from memory.search.maintenance import search_terms_redraw

# Irregular forms now index as their base word ("bought" as "buy").


class Migration(migrations.Migration):
    atomic = False  # the PostgreSQL-native repair commits in short transactions of its own

    dependencies = [("memory", "0015_word_vector")]

    operations = [migrations.RunPython(search_terms_redraw, migrations.RunPython.noop)]
