from django.contrib import admin
from django.templatetags.static import static
from django.urls import path
from django.views.generic import RedirectView

from injection.api import api
from memory.admin import engine_status

# The owner panel's model admins register here (see OwnerAdminConfig), before any page resolves.
admin.autodiscover()

urlpatterns = [
    path("admin/engine-status/", admin.site.admin_view(engine_status), name="engine_status"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("", RedirectView.as_view(pattern_name="admin:index"), name="home"),
    path("favicon.ico", RedirectView.as_view(url=static("tideline/favicon.svg"))),
]
