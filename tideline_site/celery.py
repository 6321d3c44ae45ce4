import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideline_site.settings")

app = Celery("tideline")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
