"""Fail-closed scopes as a property: whatever the projects, workspaces and queries, no read path
returns another project's memory, and a secret planted in project A never shows up for B."""

import itertools
from io import StringIO

from django.core.management import call_command
from django.test import override_settings
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from injection.services.context import context_session_start, context_turn
from memory.search import memory_search, turn_search
from memory.selectors.reads import memories_page
from memory.selectors.visibility import OWNER
from memory.services.facts import FactInput, fact_write, facts_as_of
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_global, scope_resolve, scope_visible_ids
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.lifecycle.conftest import git_repo

WORDS = [
    "harbour",
    "crane",
    "ledger",
    "invoice",
    "boundary",
    "边界",
    "兜底",
    "プラグイン",
    "puerto",
]
_counter = itertools.count()

project_names = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=8),
    min_size=2,
    max_size=3,
    unique=True,
)
plans = st.fixed_dictionaries(
    {
        "names": project_names,
        "workspaces": st.lists(st.sampled_from(["ws-a", "ws-b", "ws-c"]), min_size=3, max_size=3),
        "words": st.lists(st.sampled_from(WORDS), min_size=3, max_size=3),
        "queries": st.lists(
            st.one_of(st.sampled_from(WORDS), st.just("secret"), st.just("password")),
            min_size=1,
            max_size=2,
        ),
    }
)


def command(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def build(plan, root):
    """Each project gets a checkout, a workspace, a narrative, a fact and a raw turn, all carrying
    its own secret token; each workspace gets one memory with its own token too."""
    run = next(_counter)
    projects = []
    for index, name in enumerate(plan["names"]):
        workspace = f"{plan['workspaces'][index]}-{run}"
        repo = git_repo(root / f"{run}-{name}", f"git@github.com:team/{name}-{run}.git")
        with override_settings(TIDELINE_WORKSPACE=workspace):
            scope = scope_resolve(cwd=str(repo))
            workspace_scope = scope_resolve(explicit="workspace")
        token = f"pw{run}{name}{index}"
        word = plan["words"][index]
        narrative_write(
            data=NarrativeInput(
                scope_id=scope.pk,
                gesture=f"{name}-service {word} secret password is {token}",
                secret=True,
            )
        )
        fact_write(
            data=FactInput(
                scope_id=scope.pk,
                profile_name=f"{name}-service",
                profile_kind="project",
                kind="fact",
                predicate="db_password",
                value=token,
                secret=True,
            )
        )
        session = session_start(runtime="test", external_id=f"{run}-{name}", scope_id=scope.pk)
        turns_record(
            session_id=session.pk,
            turns=[TurnInput(role="user", content=f"{word}: the {name} password is {token}")],
        )
        ws_token = f"ws{run}{name}{index}"
        narrative_write(
            data=NarrativeInput(
                scope_id=workspace_scope.pk,
                gesture=f"{workspace} machine keeps {word} secret password {ws_token}",
            )
        )
        projects.append(
            {"repo": repo, "scope": scope, "workspace": workspace_scope, "tokens": [token]}
        )
        projects[-1]["ws_tokens"] = [ws_token]
    return projects


def outputs_for(project, query):
    """Every read path, as the caller in `project` sees it: (texts, scope ids returned)."""
    visible = scope_visible_ids(scope=project["scope"])
    texts, scopes = [], set()
    texts.append(command("context", "--query", query, "--cwd", str(project["repo"])))
    texts.append(command("by_scope", "project", "--cwd", str(project["repo"]), "--status", "all"))
    texts.append(command("by_scope", "global", "--status", "all"))
    for hit in memory_search(query=query, scope_ids=visible, limit=50):
        scopes.add(hit.memory.scope_id)
        texts.append(hit.memory.search_text)
    for hit in turn_search(query=query, scope_ids=visible, limit=50):
        scopes.add(hit.turn.scope_id)
        texts.append(hit.turn.content)
    texts.append(context_turn(query=query, scope_ids=visible, budget_tokens=4000).text)
    texts.append(context_session_start(scope_ids=visible, budget_tokens=8000).text)
    for memory in memories_page(principal=OWNER, scope_ids=visible, status="", limit=200):
        texts.append(memory.search_text)
    for fact in facts_as_of(scope_ids=visible):
        scopes.add(fact.scope_id)
        texts.append(fact.value)
    return visible, "\n".join(texts), scopes


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans)
# Identical projects apart from their names, and a query no turn contains.
@example(
    plan={
        "names": ["aaa", "aaaa"],
        "workspaces": ["ws-a", "ws-a", "ws-a"],
        "words": ["harbour", "harbour", "harbour"],
        "queries": ["secret"],
    }
)
def test_it_never_leaks_across_projects_on_any_read_path(db, tmp_path, plan):
    projects = build(plan, tmp_path)
    for reader in projects:
        for query in [*plan["queries"], *reader["tokens"]]:
            visible, text, scopes = outputs_for(reader, query)
            assert scopes <= set(visible)
            for other in projects:
                if other["scope"].pk == reader["scope"].pk:
                    continue
                for token in other["tokens"]:
                    assert token not in text
                if other["workspace"].pk != reader["workspace"].pk:
                    for token in other["ws_tokens"]:
                        assert token not in text
    unrelated = tmp_path / "not-a-project"
    unrelated.mkdir(exist_ok=True)
    out = command("context", "--query", plan["queries"][0], "--cwd", str(unrelated))
    assert out.startswith(f"scope: [{scope_global().label}]")
    for project in projects:
        for token in project["tokens"] + project["ws_tokens"]:
            assert token not in out
