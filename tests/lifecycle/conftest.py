from pathlib import Path

import pytest
from django.db import connection

from memory.models import AuditEvent, Memory, MemoryStatus


def git_repo(root: Path, remote: str | None) -> Path:
    """A directory that looks like a git checkout to scope_resolve (only .git/config is read)."""
    (root / ".git").mkdir(parents=True)
    config = "[core]\n\trepositoryformatversion = 0\n"
    if remote:
        config += (
            f'[remote "origin"]\n\turl = {remote}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n'
        )
    (root / ".git" / "config").write_text(config)
    return root


@pytest.fixture
def make_repo(tmp_path):
    def make(name: str, remote: str | None = None) -> Path:
        return git_repo(tmp_path / name, remote)

    return make


def integrity_ok() -> bool:
    if connection.vendor != "sqlite":
        return True
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA integrity_check")
        return cursor.fetchone()[0] == "ok"


def replay_statuses() -> dict[int, str]:
    """Fold the audit log, oldest first, into the status each memory should have now."""
    replayed: dict[int, str] = {}
    memory_types = {"memory", "fact", "narrative", "selfconcept"}
    for event in AuditEvent.objects.order_by("occurred_at", "pk"):
        if event.target_type not in memory_types or not isinstance(event.after, dict):
            continue
        if "statuses" in event.after:
            for pk, status in event.after["statuses"].items():
                replayed[int(pk)] = status
        elif "status" in event.after and event.target_id is not None:
            replayed[event.target_id] = event.after["status"]
    return replayed


def stored_statuses() -> dict[int, str]:
    return dict(Memory.objects.values_list("pk", "status"))


LIVE = (MemoryStatus.ACTIVE, MemoryStatus.CANDIDATE)
