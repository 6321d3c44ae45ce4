from django.db import migrations, models

# A session now keeps the API key that opened it, so a key's turn is skipped as a re-send only
# when a part of the session opened by the same key holds it: another key that recorded the same
# runtime session id in global first no longer swallows this key's turns. The key of a session
# stored before is the one its "session opened" audit row names.


def keys_from_audit(apps, schema_editor) -> None:
    AuditEvent = apps.get_model("memory", "AuditEvent")
    Session = apps.get_model("memory", "Session")
    opened = (
        AuditEvent.objects.filter(
            target_type="session", reason="session opened", key_id__isnull=False
        )
        .order_by("target_id", "id")
        .values_list("target_id", "key_id")
    )
    key_of: dict[int, int] = {}
    for session_id, key_id in opened.iterator(chunk_size=2000):
        key_of.setdefault(session_id, key_id)
    sessions_of: dict[int, list[int]] = {}
    for session_id, key_id in key_of.items():
        sessions_of.setdefault(key_id, []).append(session_id)
    for key_id, session_ids in sessions_of.items():
        for start in range(0, len(session_ids), 500):
            Session.objects.filter(pk__in=session_ids[start : start + 500]).update(key_id=key_id)


class Migration(migrations.Migration):
    dependencies = [("memory", "0024_search_terms_unknown_chinese_word_pairs")]

    operations = [
        migrations.AddField(
            model_name="session",
            name="key_id",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(keys_from_audit, migrations.RunPython.noop),
    ]
