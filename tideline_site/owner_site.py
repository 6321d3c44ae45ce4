"""The owner panel's AdminSite: its home is the dashboard (memory/admin/dashboard.py), the model
tables sit under "internals", and there is no "View site" link (Tideline has no public site)."""

from django.contrib import admin
from django.contrib.admin.apps import SimpleAdminConfig


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


class OwnerAdminConfig(SimpleAdminConfig):
    """Admin modules are discovered by the URLconf, not at start-up: `manage.py mcp` and the
    other commands never serve a page, and a stdio MCP client waits for the handshake while
    this process imports (the admin modules pull in most services, ~0.1 s)."""

    default_site = "tideline_site.owner_site.OwnerAdminSite"
