"""The owner panel's AdminSite: its home is the dashboard (memory/admin/dashboard.py), the model
tables sit under "internals", and there is no "View site" link (Tideline has no public site)."""

from django.contrib import admin
from django.contrib.admin.apps import SimpleAdminConfig
from django.contrib.admin.checks import check_admin_app, check_dependencies
from django.core import checks
from django.db import transaction


class OwnerAdminSite(admin.AdminSite):
    site_header = "Tideline · owner panel"
    site_title = "Tideline"
    index_title = "What Tideline knows"
    index_template = "admin/dashboard.html"
    site_url = None
    # The dashboard links every page; the sidebar would take a fifth of a 1366 px screen.
    enable_nav_sidebar = False

    def index(self, request, extra_context=None):
        from memory.admin.dashboard import dashboard_context

        return super().index(request, {**dashboard_context(), **(extra_context or {})})

    def password_change(self, request, extra_context=None):
        """The owner's own password, changed, is a decision like any other: one audit row, in the
        same transaction as the new hash, which it never holds."""
        from memory.admin.base import owner_reason
        from memory.services.accounts import account_change_record

        with transaction.atomic():
            response = super().password_change(request, extra_context)
            if request.method == "POST" and response.status_code == 302:
                account_change_record(
                    account=request.user,
                    created=False,
                    changes={"password": (None, None)},
                    reason=owner_reason(request, "changed own password"),
                )
        return response


def owner_admin_check(app_configs, **kwargs) -> list:
    # The checks inspect the registered model admins, so they must be registered first, whatever
    # order the system checks run in.
    admin.autodiscover()
    return check_admin_app(app_configs, **kwargs)


class OwnerAdminConfig(SimpleAdminConfig):
    """Admin modules are discovered by the URLconf (and by the admin system check), not at
    start-up: `manage.py mcp` and the other commands serve no page, and a stdio MCP client waits
    for the handshake while this process imports (the admin modules pull in most services)."""

    default_site = "tideline_site.owner_site.OwnerAdminSite"

    def ready(self) -> None:
        checks.register(check_dependencies, checks.Tags.admin)
        checks.register(owner_admin_check, checks.Tags.admin)
