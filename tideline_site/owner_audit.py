"""The owner panel's requests as the audit log's callers: each one stamps the decisions it makes."""

from django.urls import reverse

from memory.models import Actor
from memory.services.audit import audit_context, request_id_given


class OwnerPanelAuditMiddleware:
    """Every decision made on the owner panel is stamped with its request id (the caller's
    X-Request-Id or a fresh one), as the REST API and MCP stamp theirs, so the rows one click
    wrote can be found together in the audit log."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if not request.path.startswith(reverse("admin:index")):
            return self.get_response(request)
        with audit_context(
            actor=Actor.OWNER, request_id=request_id_given(request.headers.get("X-Request-Id", ""))
        ):
            return self.get_response(request)
