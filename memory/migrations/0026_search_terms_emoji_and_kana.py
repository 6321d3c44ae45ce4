from django.db import migrations

from memory.search.maintenance import search_terms_redraw

# Emoji are now search terms (🔥, 👍🏽 as 👍); a Chinese text quoting a Japanese word (「よろしく」)
# keeps its Chinese words, only its runs holding kana read as Japanese; and a generic Chinese word is
# no longer three terms (有时候 was 有时, 时候 and 有时候; stop words now, with the words inside them).


class Migration(migrations.Migration):
    atomic = False  # the PostgreSQL-native repair commits in short transactions of its own

    dependencies = [("memory", "0025_session_key")]

    operations = [migrations.RunPython(search_terms_redraw, migrations.RunPython.noop)]
