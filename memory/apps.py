from django.apps import AppConfig
from django.db.backends.signals import connection_created


class MemoryConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        from memory.search.schema import connection_prepare

        connection_created.connect(connection_prepare, dispatch_uid="tideline_search_functions")
