from django.db import migrations

from memory.search.maintenance import search_terms_redraw

# Traditional-only Chinese characters now index as their simplified form ("臺灣" as "台湾"), and a
# Japanese text's runs of kanji are also read as Chinese is ("新幹線" as a word, not only as the
# bigrams "新幹" and "幹線"), so a kanji-only query meets it.


class Migration(migrations.Migration):
    atomic = False  # the PostgreSQL-native repair commits in short transactions of its own

    dependencies = [("memory", "0020_search_terms_accents_and_format_characters")]

    operations = [migrations.RunPython(search_terms_redraw, migrations.RunPython.noop)]
