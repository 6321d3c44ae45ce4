from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import m2m_changed, post_save, pre_save


class MemoryConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        from django.contrib.auth.models import User

        from memory.search.schema import connection_prepare
        from memory.signals import (
            LINK_FIELDS,
            account_links_changed,
            user_access_after_save,
            user_access_before_save,
        )

        connection_created.connect(connection_prepare, dispatch_uid="tideline_search_functions")
        pre_save.connect(
            user_access_before_save, sender=User, dispatch_uid="tideline_account_audit"
        )
        post_save.connect(
            user_access_after_save, sender=User, dispatch_uid="tideline_account_audit"
        )
        for through in LINK_FIELDS:
            m2m_changed.connect(
                account_links_changed, sender=through, dispatch_uid="tideline_account_links_audit"
            )
