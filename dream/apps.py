from django.apps import AppConfig


class DreamConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "dream"
    verbose_name = "DREAM"
