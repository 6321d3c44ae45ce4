import os
import re
from pathlib import Path, PurePath
from urllib.parse import urlsplit

from django.conf import settings

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
    key_max = Scope._meta.get_field("key").max_length
    if len(key) > key_max:
        # Checked here, after normalising (lowercasing can lengthen a remote: "İ" is two
        # characters lower): PostgreSQL refuses a longer key where SQLite would store it.
        raise InvalidInput(
            f"a scope's key (its remote or path) is at most {key_max} characters", field="scope"
        )
    label = (label or scope_label(kind=kind, key=key))[: Scope._meta.get_field("label").max_length]
    scope, created = Scope.objects.get_or_create(
        kind=kind, key=key, defaults={"label": label, "workspace": workspace}
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


# --- Resolving a caller's scope from where it runs (seed 003: global / workspace / project) ------

_SCP_REMOTE = re.compile(r"^(?:[\w.+-]+@)?(?P<host>[\w.-]+):(?P<path>(?!//)[^\\]+)$")
# "github.com/owner/repo": a host with a dot in its name, then a path.
_BARE_REMOTE = re.compile(r"^(?P<host>[\w-]+(?:\.[\w-]+)+)/(?P<path>[^\\:]+)$")
_REMOTE_SECTION = re.compile(r'^\[\s*remote\s+"(?P<name>[^"]+)"\s*\]$')
_MAX_PARENTS = 64


def git_remote_normalise(url: str) -> str | None:
    """One spelling per repository: `git@github.com:Owner/Repo.git`, `https://u:tok@github.com/
    owner/repo/` and `ssh://git@github.com:22/owner/repo.git` all become `github.com/owner/repo`.
    Credentials never survive into the key. Returns None for anything that is not a remote URL."""
    url = (url or "").strip()
    if not url or any(ch.isspace() or ord(ch) < 32 for ch in url):
        return None
    if "://" in url:
        try:
            parts = urlsplit(url)
            host = parts.hostname
        except ValueError:
            return None
        if parts.scheme == "file":
            return _path_key(parts.path)
        if not host or parts.scheme not in {"http", "https", "ssh", "git", "git+ssh", "ssh+git"}:
            return None
        path = parts.path
    elif (match := _SCP_REMOTE.match(url)) and "/" not in match["host"]:
        host, path = match["host"], match["path"]
    elif url.startswith("/"):
        return _path_key(url)
    elif (match := _BARE_REMOTE.match(url)) is not None:
        # Tideline's own spelling of a remote (a project's key, as the API shows it).
        host, path = match["host"], match["path"]
    else:
        return None
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")]
    path = path.strip("/")
    if not path or ".." in path.split("/"):
        return None
    return f"{host.lower()}/{path.lower()}"


def _path_key(path: str) -> str | None:
    if not path or "\x00" in path or not os.path.isabs(path):
        return None
    return os.path.normpath(os.path.realpath(path))


def _git_dir_of(root: Path) -> Path | None:
    """The git directory of a work tree root: `.git/`, or the dir a `.git` file points at
    (worktrees and submodules), following `commondir` to the shared config."""
    dot_git = root / ".git"
    if dot_git.is_dir():
        return dot_git
    if not dot_git.is_file():
        return None
    try:
        first = dot_git.read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    if not first.startswith("gitdir:"):
        return None
    git_dir = Path(first[len("gitdir:") :].strip())
    git_dir = git_dir if git_dir.is_absolute() else root / git_dir
    common = git_dir / "commondir"
    if common.is_file():
        try:
            shared = Path(common.read_text().strip())
        except OSError:
            return git_dir
        git_dir = shared if shared.is_absolute() else git_dir / shared
    return git_dir


def git_remote_read(git_dir: Path) -> str | None:
    """The `origin` remote URL from a git config (or the first remote if there is no origin),
    read as text: no git binary, no subprocess."""
    try:
        lines = (git_dir / "config").read_text(errors="replace").splitlines()
    except OSError:
        return None
    remotes: dict[str, str] = {}
    section = None
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            match = _REMOTE_SECTION.match(line)
            section = match["name"] if match else None
            continue
        key, sep, value = line.partition("=")
        if section and sep and key.strip().lower() == "url":
            remotes.setdefault(section, value.strip().strip('"'))
    if not remotes:
        return None
    return remotes.get("origin") or next(iter(remotes.values()))


def _repository_root(start: Path) -> Path | None:
    current = start
    for _ in range(_MAX_PARENTS):
        if (current / ".git").exists():
            return current
        if current.parent == current:
            return None
        current = current.parent
    return None


def scope_workspace(*, create: bool = True) -> Scope | None:
    """This machine's workspace scope (settings.TIDELINE_WORKSPACE)."""
    key = settings.TIDELINE_WORKSPACE
    if create:
        return scope_ensure(kind=ScopeKind.WORKSPACE, key=key)
    return Scope.objects.filter(kind=ScopeKind.WORKSPACE, key=key).first()


def _project(key: str, *, create: bool) -> Scope | None:
    if create:
        return scope_ensure(kind=ScopeKind.PROJECT, key=key, workspace=scope_workspace())
    return Scope.objects.filter(kind=ScopeKind.PROJECT, key=key).first()


def _registered_project_for(path: str) -> Scope | None:
    """A project registered by its path (no git) that contains `path`; the deepest wins."""
    best = None
    for scope in Scope.objects.filter(kind=ScopeKind.PROJECT, key__startswith="/"):
        root = scope.key.rstrip("/") or "/"
        if (path == root or path.startswith(root + "/")) and (
            best is None or len(root) > len(best.key)
        ):
            best = scope
    return best


def _explicit(explicit: "str | int | Scope", *, create: bool) -> Scope | None:
    if isinstance(explicit, Scope):
        return Scope.objects.filter(pk=explicit.pk).first()
    if isinstance(explicit, int) and not isinstance(explicit, bool):
        return Scope.objects.filter(pk=explicit).first()
    if not isinstance(explicit, str):
        return None
    text = explicit.strip()
    if text.isdigit():
        return Scope.objects.filter(pk=int(text)).first()
    if text == ScopeKind.GLOBAL:
        return scope_global()
    if text == ScopeKind.WORKSPACE:
        return scope_workspace(create=create)
    kind, sep, rest = text.partition(":")
    if sep and kind == ScopeKind.PROJECT:
        key = git_remote_normalise(rest) or _path_key(rest.strip())
        return _project(key, create=create) if key else None
    if sep and kind == ScopeKind.WORKSPACE and rest.strip():
        if create:
            return scope_ensure(kind=ScopeKind.WORKSPACE, key=rest.strip())
        return Scope.objects.filter(kind=ScopeKind.WORKSPACE, key=rest.strip()).first()
    return Scope.objects.filter(label=text).exclude(kind=ScopeKind.GLOBAL).first()


def scope_resolve(
    *,
    cwd: str | None = None,
    git_remote: str | None = None,
    explicit: "str | int | Scope | None" = None,
    create: bool = True,
) -> Scope:
    """The scope a caller works in, fail-closed: anything unknown or malformed is global.

    `explicit` wins ("global", "workspace", "project:<remote or path>", a scope id or label), then
    `git_remote`, then `cwd`: the repository around cwd (its origin remote, else its root path), or
    a project registered by path that contains cwd. A directory outside every project is global.
    A directory this machine does not have (the agent runs in a container) is the project a
    write from it was filed in (scope_resolve_for_write), if there is one: never created here.
    Read paths pass `create=False` so that asking never creates a scope.
    """
    if explicit is not None and explicit != "":
        return _explicit(explicit, create=create) or scope_global()
    if git_remote:
        key = git_remote_normalise(git_remote)
        return (_project(key, create=create) if key else None) or scope_global()
    if not cwd or not isinstance(cwd, str):
        return scope_global()
    path = _path_key(cwd)
    if path is None:
        return scope_global()
    if not os.path.isdir(path):
        return _registered_project_for(path) or _project(path, create=False) or scope_global()
    root = _repository_root(Path(path))
    if root is not None:
        git_dir = _git_dir_of(root)
        remote = git_remote_read(git_dir) if git_dir else None
        key = (git_remote_normalise(remote) if remote else None) or _path_key(str(root))
        return (_project(key, create=create) if key else None) or scope_global()
    return _registered_project_for(path) or scope_global()


def scope_resolve_for_write(*, cwd: str = "", git_remote: str = "") -> Scope:
    """The scope a write lands in from where its caller says it is, created on first use.

    Resolving for a read falls back to global, the scope that reads least; for a write that is the
    scope every project reads, so a place that cannot be read is refused instead (a malformed
    remote, a relative cwd), and a directory this machine does not have (the agent runs in a
    container or on another machine) is a project of its own, keyed by its path. A directory
    this machine has outside every project is global, as on a read."""
    if git_remote:
        if git_remote_normalise(git_remote) is None:
            raise InvalidInput(
                f"git_remote {git_remote[:100]!r} is not a git remote URL "
                "(https://host/owner/repo, git@host:owner/repo or host/owner/repo)",
                field="git_remote",
            )
        return scope_resolve(git_remote=git_remote)
    path = _path_key(cwd)
    if path is None:
        raise InvalidInput("cwd must be an absolute path", field="cwd")
    if os.path.isdir(path):
        return scope_resolve(cwd=path)
    return _registered_project_for(path) or _project(path, create=True)


def project_root(*, cwd: str | None) -> str | None:
    """The directory a project's memories depend on: the repository root around cwd, or the
    registered project path containing it. None outside any project."""
    path = _path_key(cwd) if isinstance(cwd, str) else None
    if path is None or not os.path.isdir(path):
        return None
    root = _repository_root(Path(path))
    if root is not None:
        return _path_key(str(root))
    registered = _registered_project_for(path)
    return registered.key if registered is not None else None
