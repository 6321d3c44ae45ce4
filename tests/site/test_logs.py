"""What the server's log keeps of a request (tideline_site/logs.py, LOGGING in settings)."""

import logging

from django.urls import reverse

from memory.models import Actor, AuditAction
from memory.services.audit import audit_record


def test_it_logs_a_refused_owner_panel_request_in_one_line(client, django_user_model, caplog):
    """Before, every 403 on the panel (a POST to a read-only page) logged a full traceback."""
    client.force_login(django_user_model.objects.create_superuser("owner", "", None))
    event = audit_record(
        actor=Actor.OWNER, action=AuditAction.UPDATE, target_type="probe", reason="a decision"
    )
    url = reverse("admin:memory_auditevent_change", args=[event.pk])

    with caplog.at_level(logging.WARNING, logger="django.request"):
        refused = client.post(url, {"reason": "rewritten"})

    assert refused.status_code == 403
    logged = [record for record in caplog.records if record.name == "django.request"]
    assert logged and all(record.exc_info is None for record in logged)
    assert "Forbidden" in logged[0].getMessage()
