from django.contrib import admin
from django.urls import path

from injection.api import api
from memory.admin import engine_status

admin.site.site_header = "Tideline · owner panel"
admin.site.site_title = "Tideline"
admin.site.index_title = "Memories, timeline and audit"

urlpatterns = [
    path("admin/engine-status/", admin.site.admin_view(engine_status), name="engine_status"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
]
