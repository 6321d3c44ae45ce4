import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the owner account on first run and say once how to log in."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="owner")

    def handle(self, *args, username: str, **options) -> None:
        user_model = get_user_model()
        if user_model.objects.filter(is_superuser=True).exists():
            return
        password = secrets.token_urlsafe(12)
        user_model.objects.create_superuser(username=username, email="", password=password)
        # Shown this once and stored nowhere but as a hash: change it from the panel after login.
        self.stdout.write(
            self.style.SUCCESS(
                "\nTideline owner account created.\n"
                f"  user:     {username}\n"
                f"  password: {password}\n"
                "This password is shown only now. Change it at /admin/password_change/ "
                "or with `manage.py changepassword owner`.\n"
            )
        )
