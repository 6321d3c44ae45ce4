"""Cross-interface isolation as a state machine.

Rules create scopes (projects with real directories, some git checkouts with remotes, inside the
workspace or not; the workspace; global), keys (project, several projects, workspace, global only,
read-only, without global, and the stdio agent), memories, turns, threads and snapshots (written
by the owner's services and through every REST route and MCP tool, some secret, each carrying a
fresh canary token), and call every REST route and MCP tool, the Claude Code hook and the owner
panel. After every call: no token of a scope outside what the caller may see, no secret's token
in any agent's answer, never a 5xx, a write aimed outside the key's scopes is refused, and a
refused request or a read-only key changes no row counts.

Each example runs inside a savepoint rolled back at teardown, so examples do not pile up data;
the search index notices the rollback through its change-log token and reloads.
"""

import json
import time

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from injection.hooks import claude_code
from injection.mcp_server import mcp_server_build
from injection.services.access import apikey_authenticate, apikey_create
from memory.models import ScopeKind
from memory.selectors.visibility import LOCAL_AGENT
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_ensure, scope_global, scope_resolve, scope_workspace
from memory.services.threads import snapshot_write, thread_write
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.injection.interfaces import (
    MCP_TOOLS,
    OPERATIONS,
    REST_ROUTES,
    Aim,
    Answer,
    McpDriver,
    Place,
    Tally,
    TokenBook,
    inline_worker_threads,
    leaks,
    rest_call,
    row_counts,
    scope_ids_permitted,
    token_new,
)
from tests.lifecycle.conftest import git_repo
from tideline_site import urls as _urlconf  # noqa: F401 — registers the model admins

ENTRIES = [("rest", route) for route in sorted(REST_ROUTES)] + [
    ("mcp", tool) for tool in sorted(MCP_TOOLS)
]
EXAMPLES = 500
STEPS = 12
PANEL_PAGES = 4


class Key:
    def __init__(self, *, label: str, principal, raw: str | None) -> None:
        self.label = label
        self.principal = principal
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}") if raw else None

    def __repr__(self) -> str:
        return self.label


class Harness:
    """What lives across examples: the MCP server, temp dirs, the tally of calls made."""

    def __init__(self, *, tmp_path_factory, dream: bool) -> None:
        self.mcp = McpDriver(mcp_server_build())
        self.tmp_path_factory = tmp_path_factory
        self.dream = dream
        self.tally = Tally()
        self.dirs = 0
        # call_next's place in the walk over the entry points, kept across examples.
        self.walk = 0

    def directory(self):
        self.dirs += 1
        return self.tmp_path_factory.mktemp(f"project{self.dirs}")


class IsolationMachine(RuleBasedStateMachine):
    harness: Harness

    places = Bundle("places")
    keys = Bundle("keys")

    def __init__(self) -> None:
        super().__init__()
        self._savepoint = transaction.atomic()
        self._savepoint.__enter__()
        self.book = TokenBook()
        self.memory_ids: list[int] = []
        self.thread_ids: list[int] = []
        self.turn_ids: list[int] = []
        self.panel_seen = False

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self._savepoint.__exit__(None, None, None)

    # --- scopes --------------------------------------------------------------------------------

    @initialize(target=places)
    def global_place(self):
        return Place(scope_id=scope_global().pk, kind=ScopeKind.GLOBAL)

    @initialize(target=places)
    def workspace_place(self):
        return Place(scope_id=scope_workspace().pk, kind=ScopeKind.WORKSPACE)

    @rule(target=places, git=st.booleans(), in_workspace=st.booleans())
    def project(self, git, in_workspace):
        directory = self.harness.directory()
        if git:
            remote = f"git@example.test:team/{directory.name}.git"
            git_repo(directory, remote)
            scope = scope_resolve(cwd=str(directory))
            return Place(scope.pk, ScopeKind.PROJECT, cwd=str(directory), git_remote=remote)
        scope = scope_ensure(
            kind=ScopeKind.PROJECT,
            key=str(directory.resolve()),
            workspace=scope_workspace() if in_workspace else None,
        )
        return Place(scope.pk, ScopeKind.PROJECT, cwd=str(directory))

    # --- keys ----------------------------------------------------------------------------------

    @initialize(target=keys)
    def stdio_agent(self):
        return Key(label="stdio agent", principal=LOCAL_AGENT, raw=None)

    @initialize(target=keys, place=places, can_write=st.booleans())
    def first_key(self, place, can_write):
        self.rest_key = self.key(held=[place], include_global=True, can_write=can_write)
        return self.rest_key

    @rule(
        target=keys,
        held=st.lists(places, max_size=2, unique_by=lambda place: place.scope_id),
        include_global=st.booleans(),
        can_write=st.booleans(),
    )
    def key(self, held, include_global, can_write):
        scope_ids = [place.scope_id for place in held if place.kind != ScopeKind.GLOBAL]
        include_global = include_global or not scope_ids
        _, raw = apikey_create(
            name="machine key",
            scope_ids=scope_ids,
            include_global=include_global,
            can_write=can_write,
        )
        label = f"key{scope_ids}{'+g' if include_global else ''}{'' if can_write else ' ro'}"
        return Key(label=label, principal=apikey_authenticate(raw=raw), raw=raw)

    # --- data written by the owner's services, so every scope has canaries --------------------

    @rule(place=places, secret=st.booleans(), kind=st.sampled_from(["narrative", "thread", "turn"]))
    def seed(self, place, secret, kind):
        token = token_new()
        text = f"harbour ledger seeded {token}"
        if kind == "narrative":
            memory = narrative_write(
                data=NarrativeInput(
                    scope_id=place.scope_id, gesture=text, tags=["harbour"], secret=secret
                )
            )
            self.memory_ids.append(memory.pk)
        elif kind == "thread":
            self.thread_ids.append(thread_write(scope_id=place.scope_id, content=text).pk)
            snapshot_write(scope_id=place.scope_id, content=f"harbour snapshot {token_new()}")
        else:
            session = session_start(
                runtime="seed", external_id=f"seed-{token}", scope_id=place.scope_id
            )
            turns = turns_record(
                session_id=session.pk, turns=[TurnInput(role="user", content=text)]
            )
            self.turn_ids += [turn.pk for turn in turns]

    # --- every entry point --------------------------------------------------------------------

    @rule(
        key=keys,
        place=places,
        entry=st.sampled_from(ENTRIES),
        how=st.sampled_from(["scope_id", "cwd", "git_remote", "none"]),
        secret=st.booleans(),
        flag=st.booleans(),
        pick=st.integers(min_value=0, max_value=50),
    )
    def call(self, key, place, entry, how, secret, flag, pick):
        interface, name = entry
        if interface == "rest" and key.client is None:
            self.harness.tally.add("skipped: the stdio agent has no REST key")
            return
        operation = REST_ROUTES[name] if interface == "rest" else MCP_TOOLS[name]
        spec = OPERATIONS[operation]
        where = place.where(how)
        if spec.writes and not where:
            where = place.where("scope_id")
        aim = Aim(
            where=where,
            token=token_new(),
            session_id=f"s-{pick % 3}",
            memory_id=self._pick(self.memory_ids, pick),
            thread_id=self._pick(self.thread_ids, pick),
            turn_id=self._pick(self.turn_ids, pick) if flag else None,
            secret=secret,
            flag=flag,
            number=pick,
        )
        arguments = spec.build(aim)
        before = row_counts()
        if interface == "rest":
            answer = rest_call(key.client, name, arguments)
        else:
            principal = None if key.principal is LOCAL_AGENT else key.principal
            answer = self.harness.mcp.call(name, arguments, principal=principal)
        self.harness.tally.add(f"{interface} {name}")
        self._check(key, f"{interface} {name} {arguments}", answer, sent={aim.token})
        permitted = scope_ids_permitted(key.principal)
        target = self._target_scope(spec, place, aim)
        if spec.writes and target is not None and target not in permitted:
            assert answer.refused, f"{key} wrote outside its scopes: {name} {arguments}"
        if spec.by_id == "memory" and not self._memory_visible(aim.memory_id, permitted):
            assert answer.refused, f"{key} reached memory {aim.memory_id} via {name}"
        if answer.refused or not key.principal.can_write:
            assert row_counts() == before, f"{key} {name} {answer.status} still wrote"
        if answer.ok:
            self._remember(answer.body, aim, key)

    @rule(
        key=keys,
        place=places,
        how=st.sampled_from(["scope_id", "cwd", "git_remote", "none"]),
        secret=st.booleans(),
        flag=st.booleans(),
        pick=st.integers(min_value=0, max_value=50),
    )
    def call_next(self, key, place, how, secret, flag, pick):
        """The next entry point of one walk over them all that goes on across examples, so every
        entry point is reached in a run however unevenly `call` and the key draws fall (hypothesis
        leans to the first bundle entry, the stdio agent, which has no REST key: a REST entry goes
        with this example's first key instead). Replaying a failure may reach another entry; the
        failure's message names the call that failed."""
        entry = ENTRIES[self.harness.walk % len(ENTRIES)]
        self.harness.walk += 1
        if entry[0] == "rest" and key.client is None:
            key = self.rest_key
        self.call(key, place, entry, how, secret, flag, pick)

    @rule(key=keys, place=places, event=st.sampled_from(["SessionStart", "UserPromptSubmit"]))
    def hook(self, key, place, event):
        if key.client is None:
            return
        directory = place.cwd or str(self.harness.directory())
        payload = {"session_id": "hook-1", "cwd": directory, "prompt": "harbour ledger"}
        context = self._hook_run(key, event, payload)
        self.harness.tally.add(f"hook {event}")
        self._check(key, f"hook {event}", Answer(200, context), sent=set())

    @rule(key=keys, place=places)
    def hook_stop(self, key, place):
        if key.client is None or not place.cwd:
            return
        token = token_new()
        transcript = self.harness.directory() / "transcript.jsonl"
        line = {"type": "user", "uuid": token, "message": {"content": f"harbour {token}"}}
        transcript.write_text(json.dumps(line) + "\n")
        payload = {"session_id": "hook-1", "cwd": place.cwd, "transcript_path": str(transcript)}
        before = row_counts()
        output = self._hook_run(key, "Stop", payload)
        self.harness.tally.add("hook Stop")
        self._check(key, "hook Stop", Answer(200, output), sent={token})
        owner = self.book.owner(token)
        if owner is not None:
            assert owner.scope_id in scope_ids_permitted(key.principal), "hook synced outside"
        if not key.principal.can_write:
            assert row_counts() == before

    @precondition(lambda self: not self.panel_seen)
    @rule(picks=st.sets(st.integers(min_value=0, max_value=255), min_size=1, max_size=PANEL_PAGES))
    def owner_panel(self, picks):
        """The owner sees everything; a staff account without permissions sees no memory text.
        A few pages a call: every page is drawn in many states over a run, and rendering all of
        them at every call was most of the machine's time."""
        users = get_user_model()
        # Logged in by force_login: no password to hash (PBKDF2 costs a third of a second a user,
        # once most of this machine's run time).
        owner = users.objects.filter(username="owner").first() or users.objects.create_superuser(
            "owner", "owner@example.test", None
        )
        staff = users.objects.filter(username="staff").first() or users.objects.create_user(
            "staff", "staff@example.test", None, is_staff=True
        )
        self.panel_seen = True
        owner_client, staff_client = Client(), Client()
        owner_client.force_login(owner)
        staff_client.force_login(staff)
        pages = _panel_urls()
        urls = sorted({pages[pick % len(pages)] for pick in picks})
        if self.harness.dream:
            urls += [reverse(name) for name in DREAM_PANEL_URLS]
        for url in urls:
            seen = owner_client.get(url)
            assert seen.status_code == 200, (url, seen.status_code)
            refused = staff_client.get(url)
            text = refused.content.decode("utf-8", "replace")
            found = [token for token in set(_tokens(text)) if self.book.owner(token)]
            assert found == [], f"{url} shows {found} to a staff account without permissions"
        self.harness.tally.add("owner panel")

    @precondition(lambda self: self.harness.dream)
    @rule()
    def dream(self):
        from dream.script_layer import script_layer_run

        script_layer_run()
        self.harness.tally.add("dream script layer")

    # --- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _pick(ids: list[int], pick: int) -> int:
        return ids[pick % len(ids)] if ids else 1 + pick

    def _check(self, key: Key, what: str, answer: Answer, *, sent: set[str]) -> None:
        assert answer.status < 500, f"{what} → {answer.status}: {answer.text[:500]}"
        found = leaks(book=self.book, principal=key.principal, response_text=answer.text, sent=sent)
        assert found == [], f"{key} {what} leaked {found}: {answer.text[:800]}"

    @staticmethod
    def _target_scope(spec, place: Place, aim: Aim) -> int | None:
        if spec.by_id or not aim.where:
            return None
        if spec.global_only:
            return scope_global().pk
        return place.scope_id

    def _memory_visible(self, memory_id: int, permitted: set[int]) -> bool:
        from memory.models import Memory

        memory = Memory.objects.filter(pk=memory_id).first()
        return memory is not None and memory.scope_id in permitted and not memory.secret

    def _remember(self, body, aim: Aim, key: Key) -> None:
        owner = self.book.owner(aim.token)
        if owner is not None:
            assert owner.scope_id in scope_ids_permitted(key.principal), (
                f"{key} stored {aim.token} in scope {owner.scope_id}"
            )
        if not isinstance(body, dict):
            return
        if isinstance(body.get("id"), int) and "type" in body:
            self.memory_ids.append(body["id"])
        elif isinstance(body.get("id"), int) and "weight" in body and "status" in body:
            self.thread_ids.append(body["id"])
        self.turn_ids += [pk for pk in body.get("turn_ids") or [] if isinstance(pk, int)]

    def _hook_run(self, key: Key, event: str, payload: dict) -> str:
        def post(path: str, body: dict, *, timeout: float | None = None) -> dict:
            answer = rest_call(key.client, ("POST", path), body)
            assert answer.status < 500, f"hook {path} → {answer.status}: {answer.text[:300]}"
            if answer.status != 200:
                raise claude_code.TidelineUnavailable(str(answer.status))
            return answer.body

        original = claude_code.post
        claude_code.post = post
        try:
            context = claude_code.HANDLERS[event](payload) or ""
        except claude_code.TidelineUnavailable:
            context = ""
        finally:
            claude_code.post = original
        return claude_code.output(event, context)


def _tokens(text: str) -> list[str]:
    from tests.injection.interfaces import TOKEN

    return TOKEN.findall(text)


def _panel_urls() -> list[str]:
    urls = [
        reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        for model in admin.site._registry
    ]
    return [*sorted(urls), reverse("engine_status")]


DREAM_PANEL_URLS = ("admin:dream_attention_heatmap",)


def _run(*, tmp_path_factory, monkeypatch, dream: bool, examples: int) -> Harness:
    inline_worker_threads(monkeypatch)
    harness = Harness(tmp_path_factory=tmp_path_factory, dream=dream)

    class Machine(IsolationMachine):
        pass

    Machine.harness = harness
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        ),
    )
    return harness


@pytest.mark.slow
def test_it_keeps_every_canary_inside_what_each_caller_may_see(db, tmp_path_factory, monkeypatch):
    started = time.monotonic()
    harness = _run(
        tmp_path_factory=tmp_path_factory, monkeypatch=monkeypatch, dream=False, examples=EXAMPLES
    )
    # Hypothesis does not draw evenly, so a few entry points may go unreached in one run; each
    # one also has its own isolation, secret and bad-input cases in test_every_interface.py.
    missing = {f"{interface} {name}" for interface, name in ENTRIES} - set(harness.tally.calls)
    assert len(missing) <= len(ENTRIES) // 10, f"never called: {missing}"
    print(
        f"isolation machine: {EXAMPLES} examples, {sum(harness.tally.calls.values())} calls, "
        f"{time.monotonic() - started:.1f} s"
    )


@pytest.mark.slow
def test_it_keeps_dream_derived_reads_inside_the_callers_scopes(db, tmp_path_factory, monkeypatch):
    """The same machine with DREAM's script layer among the rules: attention, clusters and graph
    must stay per caller after DREAM has derived them, and its owner pages closed to staff."""
    _run(tmp_path_factory=tmp_path_factory, monkeypatch=monkeypatch, dream=True, examples=40)
