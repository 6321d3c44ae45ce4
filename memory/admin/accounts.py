"""Owner accounts follow the panel's rules too: nothing is deleted (a departed admin is made
inactive, which keeps every audit reason that names them meaningful), and every account the owner
adds or changes, a password included, is a decision in the audit log."""

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db import router, transaction
from django.http import HttpRequest

from memory.admin.base import OwnerPanelMixin, owner_reason
from memory.services.accounts import account_change_record


class AccountAdminMixin(OwnerPanelMixin):
    def construct_change_message(self, request: HttpRequest, form, formsets, add=False):
        """Django calls this once per saved account form (add, change, a user's password page),
        right after the save: the one point where both the decision and what changed are known."""
        account = form.instance if isinstance(form, forms.ModelForm) else form.user
        changes = {
            name: (form.initial.get(name), form.cleaned_data.get(name))
            for name in form.changed_data
        }
        verb = "added" if add else "changed"
        account_change_record(
            account=account,
            created=add,
            changes=changes,
            reason=owner_reason(request, f"{verb} {self.opts.verbose_name} {account}"),
        )
        return super().construct_change_message(request, form, formsets, add)


class OwnerUserAdmin(AccountAdminMixin, UserAdmin):
    def user_change_password(self, request: HttpRequest, id: str, form_url=""):
        # Django saves the password outside a transaction (the add and change pages have one), so
        # the new password and its audit row would otherwise commit apart.
        with transaction.atomic(using=router.db_for_write(self.model)):
            return super().user_change_password(request, id, form_url)


class OwnerGroupAdmin(AccountAdminMixin, GroupAdmin):
    pass


for model, model_admin in ((User, OwnerUserAdmin), (Group, OwnerGroupAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
