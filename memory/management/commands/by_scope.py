"""`manage.py by_scope {global|workspace|project} [--cwd DIR]`: the memories one scope holds.

`project` means the project DIR belongs to (never another one); `workspace` is this machine.
"""

import os

from django.core.management.base import BaseCommand, CommandError

from memory.management.arguments import LIMIT_MAX, bounded_int
from memory.models import Memory, MemoryStatus, ScopeKind
from memory.services.scopes import scope_global, scope_resolve, scope_workspace


class Command(BaseCommand):
    help = (
        "List the memories of the global scope, this machine's workspace, or the project at --cwd."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("kind", choices=ScopeKind.values)
        parser.add_argument("--cwd", default=None, help="the project directory (default: .)")
        parser.add_argument(
            "--status",
            default=MemoryStatus.ACTIVE,
            choices=[*MemoryStatus.values, "all"],
            help="which lifecycle status to list (default active)",
        )
        parser.add_argument(
            "--limit",
            type=bounded_int(low=1, high=LIMIT_MAX),
            default=100,
            help="list at most N memories (default 100)",
        )

    def handle(self, *args, kind: str, cwd: str | None, status: str, limit: int, **options) -> None:
        if kind == ScopeKind.GLOBAL:
            scope = scope_global()
        elif kind == ScopeKind.WORKSPACE:
            scope = scope_workspace(create=False)
        else:
            scope = scope_resolve(
                cwd=os.path.abspath(os.path.expanduser(cwd or os.getcwd())), create=False
            )
            if scope.kind != ScopeKind.PROJECT:
                raise CommandError(f"{cwd or os.getcwd()} is not inside a known project")
        if scope is None:
            self.stdout.write("no workspace memories on this machine yet")
            return
        rows = Memory.objects.filter(scope=scope).order_by("-recorded_at", "-pk")
        if status != "all":
            rows = rows.filter(status=status)
        total = rows.count()
        self.stdout.write(
            f"[{scope.label}] {total} {'' if status == 'all' else status + ' '}memories"
        )
        for memory in rows[:limit]:
            suffix = (
                ""
                if status != "all"
                else f"  ({memory.status}{' · ' + memory.expired_by if memory.expired_by else ''})"
            )
            self.stdout.write(f"- #{memory.pk} {memory.summary}{suffix}")
        if total > limit:
            self.stdout.write(f"… {total - limit} more (--limit)")
