from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from memory.services.accounts import owner_create


class Command(BaseCommand):
    help = "Create the owner account on first run and say once how to log in."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="owner")

    def handle(self, *args, username: str, **options) -> None:
        user_model = get_user_model()
        # The login form takes only names the user model's own field accepts: any other name
        # would create an owner nobody can log in as.
        field = user_model._meta.get_field(user_model.USERNAME_FIELD)
        try:
            username = field.clean(username, None)
        except ValidationError as exc:
            raise CommandError(f"--username {username!r}: {' '.join(exc.messages)}") from exc
        password = owner_create(username=username)
        if password is None:
            return
        # Shown this once and stored nowhere but as a hash: change it from the panel after login.
        self.stdout.write(
            self.style.SUCCESS(
                "\nTideline owner account created.\n"
                f"  user:     {username}\n"
                f"  password: {password}\n"
                "This password is shown only now. Change it at /admin/password_change/ "
                f"or with `manage.py changepassword {username}`.\n"
            )
        )
