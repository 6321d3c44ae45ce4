from django.db import migrations

from memory.search.maintenance import search_terms_redraw

# Latin words now index without their accents ("reunión" as "reunion") and format characters
# (zero-width spaces, soft hyphens) no longer split a word in two.


class Migration(migrations.Migration):
    atomic = False  # the PostgreSQL-native repair commits in short transactions of its own

    dependencies = [("memory", "0019_search_visible_statistics")]

    operations = [migrations.RunPython(search_terms_redraw, migrations.RunPython.noop)]
