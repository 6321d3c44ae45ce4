"""The owner panel's AdminSite: its home is the dashboard (memory/admin/dashboard.py), the model
tables sit under "internals", and there is no "View site" link (Tideline has no public site)."""

from django.contrib import admin
from django.contrib.admin.apps import SimpleAdminConfig
from django.contrib.admin.checks import check_admin_app, check_dependencies
from django.core import checks


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
