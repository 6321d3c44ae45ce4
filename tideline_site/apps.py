from django.apps import AppConfig


class SiteConfig(AppConfig):
    """The site itself: system checks for settings that would otherwise fail at first use, and
    the owner-panel login throttle."""

    name = "tideline_site"
    verbose_name = "Tideline site"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed

        from tideline_site import checks  # noqa: F401 — registers the checks
        from tideline_site.edge import login_failure_record

        user_login_failed.connect(login_failure_record, dispatch_uid="tideline-login-failures")
