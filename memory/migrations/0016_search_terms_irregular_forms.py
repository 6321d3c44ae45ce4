from django.db import migrations

from memory.models import Actor
from memory.search.maintenance import search_index_check


def retokenise(apps, schema_editor):
    # Irregular forms now index as their base word ("bought" as "buy"), so the word index and
    # PostgreSQL's stored documents hold stale terms until rewritten: the repair `reindex` runs.
    search_index_check(repair=True, actor=Actor.SYSTEM)


class Migration(migrations.Migration):
    # The PostgreSQL-native repair applies its queue in short transactions of its own.
    atomic = False

    dependencies = [("memory", "0015_word_vector")]

    operations = [migrations.RunPython(retokenise, migrations.RunPython.noop)]
