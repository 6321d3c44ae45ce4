"""`manage.py context --query Q [--cwd DIR]`: what memory would give an agent working in DIR.

The caller's scope comes from DIR (its git remote or path), fail-closed: a project sees itself,
its workspace and global; anywhere else sees global only. Dependencies are checked first, so a
deleted project's memories never come back. Secret memories are left out, as from every agent's
injection, and nothing counts as recalled: this is the owner looking, and an activation would move
the memories' decay and the attention heatmap.
"""

import os
from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from memory.management.arguments import (
    QUERY_MAX_CHARS,
    bounded_int,
    bounded_text,
    moment,
    scope_named,
)
from memory.models import Scope
from memory.search import memory_search
from memory.services.errors import TidelineError
from memory.services.maintenance import dependencies_check
from memory.services.scopes import scope_resolve, scope_visible_ids


class Command(BaseCommand):
    help = (
        "Recall the memories relevant to a query, as an agent in --cwd would get them (secret "
        "memories left out); the recall is not counted as an activation."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--query",
            required=True,
            type=bounded_text(max_chars=QUERY_MAX_CHARS),
            help=f"what to recall (at most {QUERY_MAX_CHARS} characters, as over the API)",
        )
        parser.add_argument("--cwd", default=None, help="directory the agent works in (default: .)")
        parser.add_argument(
            "--scope",
            default=None,
            help="explicit scope: global, workspace, project:<remote or path>, a scope id or label, "
            "or a directory (its project)",
        )
        parser.add_argument("--limit", type=bounded_int(low=1, high=100), default=10)
        parser.add_argument(
            "--as-of", type=moment, default=None, help="what was valid at this ISO date or time"
        )

    def handle(
        self,
        *args,
        query: str,
        cwd: str | None,
        scope: str | None,
        limit: int,
        as_of: datetime | None,
        **options,
    ) -> None:
        caller = (
            scope_named(scope, create=False)
            if scope
            else scope_resolve(
                cwd=os.path.abspath(os.path.expanduser(cwd or os.getcwd())), create=False
            )
        )
        visible = scope_visible_ids(scope=caller)
        labels = dict(Scope.objects.filter(pk__in=visible).values_list("pk", "label"))
        check = dependencies_check(scope_ids=visible)
        try:
            hits = memory_search(
                query=query,
                scope_ids=visible,
                limit=limit,
                as_of=as_of,
                exclude_secret=True,
            )
        except TidelineError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"scope: [{caller.label}] · visible: "
            + ", ".join(f"[{labels[pk]}]" for pk in visible if pk in labels)
        )
        if check.expired:
            self.stdout.write(
                f"expired {check.expired} memor{'y' if check.expired == 1 else 'ies'} whose "
                f"dependency is gone ({check.elapsed_ms:.1f} ms)"
            )
        if not hits:
            self.stdout.write("no memories match")
        for hit in hits:
            memory = hit.memory
            self.stdout.write(
                f"- #{memory.pk} [{labels.get(memory.scope_id, '?')}] {memory.summary} "
                f"(score {hit.score:.3f})"
            )
