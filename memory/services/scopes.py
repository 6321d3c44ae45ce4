from pathlib import PurePath

from memory.models import Scope, ScopeKind
from memory.models.scopes import SCOPE_KIND_LABELS
from memory.services.errors import InvalidInput, NotFound

GLOBAL_KEY = "global"


def scope_global() -> Scope:
    scope, _ = Scope.objects.get_or_create(
        kind=ScopeKind.GLOBAL,
        key=GLOBAL_KEY,
        defaults={"label": SCOPE_KIND_LABELS[ScopeKind.GLOBAL]},
    )
    return scope


def scope_label(*, kind: str, key: str) -> str:
    """A readable label: "项目·archive-manager" for a project path or remote, never a hash."""
    if kind == ScopeKind.GLOBAL:
        return SCOPE_KIND_LABELS[ScopeKind.GLOBAL]
    name = PurePath(key.rstrip("/")).name or key
    if name.endswith(".git"):
        name = name[: -len(".git")]
    return f"{SCOPE_KIND_LABELS[ScopeKind(kind)]}·{name}"


def scope_ensure(*, kind: str, key: str, label: str = "", workspace: Scope | None = None) -> Scope:
    """Get or create the scope for (kind, key)."""
    if kind not in ScopeKind.values:
        raise InvalidInput(f"unknown scope kind {kind!r}", field="scope")
    if kind == ScopeKind.GLOBAL:
        return scope_global()
    key = key.strip()
    if not key:
        raise InvalidInput("a workspace or project scope needs a key", field="scope")
    scope, created = Scope.objects.get_or_create(
        kind=kind,
        key=key,
        defaults={"label": label or scope_label(kind=kind, key=key), "workspace": workspace},
    )
    if not created and workspace is not None and scope.workspace_id is None:
        scope.workspace = workspace
        scope.save(update_fields=["workspace"])
    return scope


def scope_get(*, scope_id: int) -> Scope:
    try:
        return Scope.objects.get(pk=scope_id)
    except (Scope.DoesNotExist, ValueError, TypeError) as exc:
        raise NotFound(f"unknown scope {scope_id!r}", field="scope") from exc


def scope_validate(*, scope_id: int) -> Scope:
    """Like scope_get, but for writes: an unknown scope is bad input, not a missing page."""
    try:
        return Scope.objects.get(pk=scope_id)
    except (Scope.DoesNotExist, ValueError, TypeError) as exc:
        raise InvalidInput(f"unknown scope {scope_id!r}", field="scope") from exc


def scope_visible_ids(*, scope: Scope | None) -> list[int]:
    """The scopes a caller in `scope` may read, fail-closed: a project sees itself, its workspace and
    global; a workspace sees itself and global; anything else (none, unknown) sees global only."""
    global_id = scope_global().pk
    if scope is None or scope.kind == ScopeKind.GLOBAL:
        return [global_id]
    visible = [scope.pk]
    if scope.kind == ScopeKind.PROJECT and scope.workspace_id:
        visible.append(scope.workspace_id)
    visible.append(global_id)
    return visible
