import pytest

from memory.models import Scope, ScopeKind
from memory.services.errors import InvalidInput
from memory.services.scopes import (
    git_remote_normalise,
    project_root,
    scope_ensure,
    scope_global,
    scope_resolve,
    scope_visible_ids,
    scope_workspace,
)


@pytest.mark.parametrize(
    "remote",
    [
        "git@github.com:Jiulanyanyue-Boop/Archive-Manager.git",
        "https://github.com/jiulanyanyue-boop/archive-manager",
        "https://user:ghp_secret@github.com/jiulanyanyue-boop/archive-manager.git/",
        "ssh://git@github.com:22/jiulanyanyue-boop/archive-manager.git",
    ],
)
def test_it_normalises_every_spelling_of_a_remote_to_one_key(remote):
    assert git_remote_normalise(remote) == "github.com/jiulanyanyue-boop/archive-manager"


@pytest.mark.parametrize(
    "remote", ["", "not a remote", "http://", "git@host:../etc", "ftp://x/y", "c:\\repo", "a\nb"]
)
def test_it_refuses_malformed_remotes(remote):
    assert git_remote_normalise(remote) is None


def test_it_binds_a_checkout_to_its_remote_from_any_subdirectory(db, make_repo):
    repo = make_repo("am", "git@github.com:someone/archive-manager.git")
    (repo / "src" / "deep").mkdir(parents=True)
    scope = scope_resolve(cwd=str(repo / "src" / "deep"))
    assert scope.kind == ScopeKind.PROJECT
    assert scope.key == "github.com/someone/archive-manager"
    assert scope.label == "项目·archive-manager"
    assert scope.workspace == scope_workspace(create=False)
    # A second checkout of the same repository is the same project.
    clone = make_repo("elsewhere", "https://github.com/someone/archive-manager.git")
    assert scope_resolve(cwd=str(clone)).pk == scope.pk
    assert project_root(cwd=str(repo / "src")) == str(repo.resolve())


def test_it_binds_a_repository_without_a_remote_to_its_path(db, make_repo):
    repo = make_repo("local-only")
    scope = scope_resolve(cwd=str(repo))
    assert scope.kind == ScopeKind.PROJECT and scope.key == str(repo.resolve())
    assert scope.label == "项目·local-only"


def test_it_reads_a_worktree_git_file(db, tmp_path, make_repo):
    main = make_repo("main-checkout", "git@github.com:someone/worktree-demo.git")
    (main / ".git" / "worktrees" / "wt").mkdir(parents=True)
    (main / ".git" / "worktrees" / "wt" / "commondir").write_text("../..\n")
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {main / '.git' / 'worktrees' / 'wt'}\n")
    assert scope_resolve(cwd=str(worktree)).key == "github.com/someone/worktree-demo"


def test_it_finds_a_project_registered_by_path(db, tmp_path):
    root = tmp_path / "plain-project"
    (root / "docs").mkdir(parents=True)
    registered = scope_ensure(kind=ScopeKind.PROJECT, key=str(root.resolve()))
    assert scope_resolve(cwd=str(root / "docs")).pk == registered.pk


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cwd": None},
        {"cwd": ""},
        {"cwd": "relative/dir"},
        {"cwd": "/definitely/not/here"},
        {"cwd": "/tmp/\x00evil"},
        {"git_remote": "::::"},
        {"explicit": "project:"},
        {"explicit": "no-such-label"},
        {"explicit": 987654},
        {"explicit": ["global"]},
    ],
)
def test_it_fails_closed_to_global_on_unknown_or_malformed_input(db, kwargs):
    scope = scope_resolve(**kwargs)
    assert scope == scope_global()
    assert scope_visible_ids(scope=scope) == [scope_global().pk]


def test_it_sees_only_global_from_an_unrelated_directory(db, tmp_path, make_repo):
    make_repo("a", "git@github.com:x/a.git")
    unrelated = tmp_path / "downloads"
    unrelated.mkdir()
    assert scope_resolve(cwd=str(unrelated)) == scope_global()


def test_it_creates_nothing_on_a_read(db, make_repo):
    repo = make_repo("fresh", "git@github.com:x/fresh.git")
    # The global scope exists in every store (a transactional test elsewhere may have flushed it).
    global_scope = scope_global()
    before = Scope.objects.count()
    assert scope_resolve(cwd=str(repo), create=False) == global_scope
    assert Scope.objects.count() == before


def test_it_honours_explicit_scopes(db, make_repo):
    project = scope_resolve(explicit="project:git@github.com:x/explicit.git")
    assert project.key == "github.com/x/explicit"
    assert scope_resolve(explicit=str(project.pk)) == project
    assert scope_resolve(explicit=project.label) == project
    assert scope_resolve(explicit="workspace") == scope_workspace(create=False)
    assert scope_resolve(explicit="global") == scope_global()
    visible = scope_visible_ids(scope=project)
    assert visible == [project.pk, scope_workspace(create=False).pk, scope_global().pk]


def test_it_refuses_a_remote_too_long_to_be_a_key_and_cuts_a_long_label(db):
    """PostgreSQL refuses a key over 512 or a label over 200 characters; SQLite stored them, so
    the same write answered 500 on one backend and 200 on the other."""
    with pytest.raises(InvalidInput, match="at most 512"):
        scope_resolve(explicit="project:github.com:me/" + "İ" * 400)

    long_name = scope_resolve(explicit="project:github.com:me/" + "r" * 300)

    assert long_name.key == "github.com/me/" + "r" * 300
    assert len(long_name.label) == 200
