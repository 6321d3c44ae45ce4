from django.apps import AppConfig


class InjectionConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "injection"
