"""Owner accounts follow the panel's one rule too: nothing is deleted. A departed admin is made
inactive, which keeps every audit reason that names them meaningful."""

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User


class OwnerUserAdmin(UserAdmin):
    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class OwnerGroupAdmin(GroupAdmin):
    def has_delete_permission(self, request, obj=None) -> bool:
        return False


for model, model_admin in ((User, OwnerUserAdmin), (Group, OwnerGroupAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
