from django.contrib import admin
from django.urls import path

admin.site.site_header = "Tideline · owner panel"
admin.site.site_title = "Tideline"
admin.site.index_title = "Memories, timeline and audit"

urlpatterns = [
    path("admin/", admin.site.urls),
]
