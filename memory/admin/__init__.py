"""The owner panel. Delete is offered nowhere: not per object (every ModelAdmin here refuses it) and
not as the site-wide bulk action."""

from django.contrib import admin

from memory.admin import accounts, audit, entities, memories, timeline
from memory.admin.status import engine_status

admin.site.disable_action("delete_selected")

__all__ = ["accounts", "audit", "engine_status", "entities", "memories", "timeline"]
