"""`manage.py apikey create|list|revoke`: bearer keys for the REST API and MCP over HTTP."""

from django.core.management.base import BaseCommand, CommandError

from injection.services.access import apikey_create, apikey_revoke
from memory.management.arguments import scope_named
from memory.models import ApiKey, ScopeKind
from memory.services.errors import TidelineError


class Command(BaseCommand):
    help = "Create, list or revoke API keys. The secret is printed once; only its hash is kept."

    def add_arguments(self, parser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="create a key bound to scopes")
        create.add_argument(
            "--scope",
            action="append",
            required=True,
            help='"global", "workspace", "project:<git remote or path>", a scope id or label, or '
            "a project directory; repeat for several",
        )
        create.add_argument("--name", default="agent", help="a name to recognise the key by")
        create.add_argument(
            "--no-global", action="store_true", help="do not let the key read global memories"
        )
        create.add_argument("--read-only", action="store_true", help="the key cannot write")
        actions.add_parser("list", help="list keys (never their secrets)")
        revoke = actions.add_parser("revoke", help="revoke a key by its prefix")
        revoke.add_argument("prefix")

    def handle(self, *args, action: str, **options) -> None:
        try:
            getattr(self, f"_{action}")(**options)
        except TidelineError as exc:
            raise CommandError(str(exc)) from exc

    def _create(self, *, scope, name, no_global, read_only, **_) -> None:
        scopes = [scope_named(spec, create=True) for spec in scope]
        bound = [s for s in scopes if s.kind != ScopeKind.GLOBAL]
        include_global = not no_global
        if no_global and len(bound) != len(scopes):
            raise CommandError("--no-global contradicts --scope global")
        key, raw = apikey_create(
            name=name,
            scope_ids=[s.pk for s in bound],
            include_global=include_global,
            can_write=not read_only,
        )
        labels = ", ".join([s.label for s in bound] + (["全局 (global)"] if include_global else []))
        self.stdout.write(f"key {key.prefix} ({key.name}) for: {labels}")
        self.stdout.write("Store this secret now; it is not shown again:")
        self.stdout.write(raw)

    def _list(self, **_) -> None:
        for key in ApiKey.objects.prefetch_related("scopes").order_by("created_at"):
            state = "revoked" if key.revoked_at else "active"
            scopes = ", ".join(s.label for s in key.scopes.all())
            if key.include_global:
                scopes = f"{scopes}, 全局" if scopes else "全局"
            mode = "read-only" if not key.can_write else "read-write"
            self.stdout.write(f"{key.prefix}  {state:8} {mode:10} {key.name}: {scopes}")

    def _revoke(self, *, prefix, **_) -> None:
        key = apikey_revoke(prefix=prefix)
        self.stdout.write(f"revoked {key.prefix} ({key.name})")
