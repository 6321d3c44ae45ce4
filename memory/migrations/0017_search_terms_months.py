from django.db import migrations

from memory.models import Actor
from memory.search.maintenance import search_index_check


def retokenise(apps, schema_editor):
    # Chinese and Japanese months (2024年1月, 十二月), Spanish months ("7 de enero") and year-first
    # dates (2024/01/07) now also index as the English month words a turn's date terms use, so the
    # word index and PostgreSQL's stored documents hold stale terms until rewritten.
    search_index_check(repair=True, actor=Actor.SYSTEM)


class Migration(migrations.Migration):
    # The PostgreSQL-native repair applies its queue in short transactions of its own.
    atomic = False

    dependencies = [("memory", "0016_search_terms_irregular_forms")]

    operations = [migrations.RunPython(retokenise, migrations.RunPython.noop)]
