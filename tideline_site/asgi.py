import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from tideline_site.edge import edge_wrap

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideline_site.settings")
# Throttling, bounded bodies and body timeouts happen before Django reads anything.
application = edge_wrap(get_asgi_application())

if settings.TIDELINE_WARM_ON_START:
    from injection.services.warmup import server_warm_in_background

    server_warm_in_background()
