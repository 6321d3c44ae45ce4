"""Every REST route and every MCP tool has its isolation, secret, bad-input and no-key cases.

The registry in `tests/injection/interfaces.py` maps each route and tool to its operation; the
meta-tests below enumerate what the ninja API and the MCP server really expose and fail when an
entry point is missing from it, so a new endpoint cannot ship without its cases. The cases then
run for real against project A (data, secrets) with a key bound to project B.
"""

import dataclasses
import re
from types import SimpleNamespace

import anyio
import pytest
from django.db import transaction
from django.test import Client

from dream.script_layer import script_layer_run
from injection.api import api
from injection.mcp_server import mcp_server_build
from injection.mcp_tools import TOOLS
from injection.services.access import apikey_authenticate, apikey_create
from memory.models import Memory, ScopeKind
from memory.services.embedding import memories_embed
from memory.services.facts import FactInput, fact_write
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_global, scope_resolve
from memory.services.threads import snapshot_write, thread_write
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.injection.interfaces import (
    COMMON_WORDS,
    MCP_TOOLS,
    OPERATIONS,
    REST_ROUTES,
    Aim,
    McpDriver,
    TokenBook,
    inline_worker_threads,
    leaks,
    rest_call,
    row_counts,
    token_new,
)
from tests.lifecycle.conftest import git_repo

HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


def _routes_served() -> set[tuple[str, str]]:
    schema = api.get_openapi_schema()
    return {
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def test_it_has_cases_for_every_rest_route():
    served = _routes_served()
    assert served, "the OpenAPI schema lists no route"
    assert served - set(REST_ROUTES) == set(), "routes with no isolation case"
    assert set(REST_ROUTES) - served == set(), "cases for routes that no longer exist"
    assert set(REST_ROUTES.values()) <= set(OPERATIONS)


def test_it_has_cases_for_every_mcp_tool():
    listed = {tool.name for tool in anyio.run(mcp_server_build().list_tools)}
    declared = {spec.name for spec in TOOLS}
    assert listed == declared
    assert listed - set(MCP_TOOLS) == set(), "tools with no isolation case"
    assert set(MCP_TOOLS) - listed == set(), "cases for tools that no longer exist"
    assert set(MCP_TOOLS.values()) <= set(OPERATIONS)


# MCP's context_record appends one turn as it happens; REST batches turns through POST /turns,
# whose items take the same speaker and time. REST's POST /turn (record a turn and get the
# per-turn block) is the hook's; an MCP client asks memory_surface for the same block.
MCP_ONLY = {"turn_record"}
REST_ONLY = {"turn_take"}


def test_it_offers_every_operation_on_both_interfaces():
    assert set(MCP_TOOLS.values()) == set(OPERATIONS) - REST_ONLY
    assert set(REST_ROUTES.values()) == set(OPERATIONS) - MCP_ONLY


# --- the world: project A holds the data, a key is bound to project B --------------------------


class World(SimpleNamespace):
    pass


def _write(client: Client, route: tuple[str, str], arguments: dict) -> dict:
    answer = rest_call(client, route, arguments)
    assert answer.ok, answer.text
    return answer.body


@pytest.fixture
def world(db, tmp_path) -> World:
    dir_a = git_repo(tmp_path / "alpha", "git@example.test:team/alpha.git")
    dir_b = git_repo(tmp_path / "beta", "https://example.test/team/beta.git")
    scope_a = scope_resolve(cwd=str(dir_a))
    scope_b = scope_resolve(cwd=str(dir_b))
    _, raw_a = apikey_create(name="owner of A", scope_ids=[scope_a.pk])
    _, raw_b = apikey_create(name="agent in B", scope_ids=[scope_b.pk], include_global=False)
    a = Client(HTTP_AUTHORIZATION=f"Bearer {raw_a}")
    b = Client(HTTP_AUTHORIZATION=f"Bearer {raw_b}")
    where_a = {"scope_id": scope_a.pk}
    where_b = {"scope_id": scope_b.pk}

    def narrative(client, where, *, secret: bool) -> tuple[str, dict]:
        token = token_new()
        body = _write(
            client,
            ("POST", "/api/v1/narratives"),
            {**where, "gesture": f"harbour ledger {token}", "tags": ["harbour"], "secret": secret},
        )
        return token, body

    open_token, open_memory = narrative(a, where_a, secret=False)
    secret_token, secret_memory = narrative(a, where_a, secret=True)
    b_secret_token, b_secret_memory = narrative(b, where_b, secret=True)
    fact_token = token_new()
    _write(
        a,
        ("POST", "/api/v1/facts"),
        {**where_a, "profile_name": "user", "kind": "fact", "predicate": "harbour_note"}
        | {"value": f"harbour {fact_token}", "secret": True},
    )
    turn_token = token_new()
    synced = _write(
        a,
        ("POST", "/api/v1/turns"),
        {**where_a, "session_id": "alpha-1"}
        | {"turns": [{"role": "user", "content": f"harbour ledger {turn_token}"}]},
    )
    thread_token = token_new()
    thread = thread_write(scope_id=scope_a.pk, content=f"harbour ledger {thread_token}")
    snapshot_token = token_new()
    snapshot_write(scope_id=scope_a.pk, content=f"harbour ledger {snapshot_token}")
    global_token = token_new()
    thread_write(scope_id=scope_global().pk, content=f"harbour global {global_token}")
    return World(
        scope_a=scope_a,
        scope_b=scope_b,
        dir_a=str(dir_a),
        dir_b=str(dir_b),
        raw_b=raw_b,
        a=a,
        b=b,
        principal_a=apikey_authenticate(raw=raw_a),
        principal_b=apikey_authenticate(raw=raw_b),
        a_tokens={open_token, secret_token, fact_token, turn_token, thread_token, snapshot_token},
        secret_tokens={secret_token, fact_token, b_secret_token},
        global_token=global_token,
        open_memory_id=open_memory["id"],
        secret_memory_id=secret_memory["id"],
        b_secret_memory_id=b_secret_memory["id"],
        thread_a_id=thread.pk,
        turn_a_id=synced["turn_ids"][0],
    )


@pytest.fixture
def mcp(monkeypatch) -> McpDriver:
    inline_worker_threads(monkeypatch)
    return McpDriver(mcp_server_build())


def _aims_at_a(world: World, operation: str) -> list[Aim]:
    """Every way key B could try to reach project A through this operation."""
    by_id = OPERATIONS[operation].by_id
    if by_id == "memory":
        return [
            Aim(where={}, token=token_new(), memory_id=world.open_memory_id),
            Aim(where={}, token=token_new(), memory_id=world.secret_memory_id),
        ]
    if by_id == "thread":
        return [Aim(where={}, token=token_new(), thread_id=world.thread_a_id)]
    return [
        Aim(where=where, token=token_new(), session_id="alpha-1", turn_id=world.turn_a_id)
        for where in (
            {"scope_id": world.scope_a.pk},
            {"cwd": world.dir_a},
            {"git_remote": "ssh://git@example.test/team/alpha.git"},
        )
    ]


def _aims_at_b(world: World, operation: str) -> list[Aim]:
    """Key B working at home, where a secret of its own is stored, and with no place named."""
    if OPERATIONS[operation].by_id == "memory":
        return [Aim(where={}, token=token_new(), memory_id=world.b_secret_memory_id)]
    if OPERATIONS[operation].by_id == "thread":
        return []
    return [
        Aim(where={"cwd": world.dir_b}, token=token_new(), session_id="beta-1"),
        Aim(where={}, token=token_new(), session_id="beta-2"),
    ]


def _check_isolated(world: World, operation: str, call) -> None:
    book = TokenBook()
    for aim in _aims_at_a(world, operation):
        arguments = OPERATIONS[operation].build(aim)
        before = row_counts()
        answer = call(arguments)
        assert answer.status < 500, answer.text
        found = leaks(
            book=book,
            principal=world.principal_b,
            response_text=answer.text,
            sent={aim.token},
        )
        assert found == [], f"{operation} {arguments} leaked {found}: {answer.text[:500]}"
        assert not (world.a_tokens & set(answer.text.split())), answer.text[:500]
        if OPERATIONS[operation].writes:
            assert answer.refused, f"{operation} {arguments} wrote into A: {answer.text[:300]}"
        if answer.refused:
            assert row_counts() == before, f"refused {operation} {arguments} still wrote"


def _check_secret_free(world: World, operation: str, call) -> None:
    book = TokenBook()
    for aim in _aims_at_b(world, operation):
        answer = call(OPERATIONS[operation].build(aim))
        assert answer.status < 500, answer.text
        found = leaks(
            book=book, principal=world.principal_b, response_text=answer.text, sent={aim.token}
        )
        assert found == [], f"{operation} leaked {found}"
        assert not any(token in answer.text for token in world.secret_tokens), answer.text[:500]


def _check_bad_input(world: World, operation: str, call) -> None:
    valid = OPERATIONS[operation].build(
        Aim(where={"cwd": world.dir_b}, token=token_new(), session_id="beta-bad")
    )
    for arguments in (*OPERATIONS[operation].bad, {**valid, "zz_unknown_field": 1}):
        before = row_counts()
        answer = call(arguments)
        assert answer.refused, f"{operation} {arguments} → {answer.status} {answer.text[:300]}"
        assert row_counts() == before, f"bad input to {operation} {arguments} still wrote"


REST_CASES = sorted(REST_ROUTES.items())
MCP_CASES = sorted(MCP_TOOLS.items())


def _rest(world: World, route: tuple[str, str], client: Client | None = None):
    """Calls the route with key B's client, or the one given."""
    return lambda arguments: rest_call(client or world.b, route, arguments)


def _mcp(world: World, mcp: McpDriver, tool: str, principal=None):
    """Calls the tool as key B's principal, or the one given."""
    return lambda arguments: mcp.call(tool, arguments, principal=principal or world.principal_b)


@pytest.mark.parametrize(
    ("route", "operation"), REST_CASES, ids=[" ".join(r) for r, _ in REST_CASES]
)
def test_it_keeps_a_foreign_key_out_of_project_a_over_rest(world, route, operation):
    _check_isolated(world, operation, _rest(world, route))


@pytest.mark.parametrize(("tool", "operation"), MCP_CASES, ids=[t for t, _ in MCP_CASES])
def test_it_keeps_a_foreign_key_out_of_project_a_over_mcp(world, mcp, tool, operation):
    _check_isolated(world, operation, _mcp(world, mcp, tool))


@pytest.mark.parametrize(
    ("route", "operation"), REST_CASES, ids=[" ".join(r) for r, _ in REST_CASES]
)
def test_it_never_answers_a_secret_over_rest(world, route, operation):
    _check_secret_free(world, operation, _rest(world, route))


@pytest.mark.parametrize(("tool", "operation"), MCP_CASES, ids=[t for t, _ in MCP_CASES])
def test_it_never_answers_a_secret_over_mcp(world, mcp, tool, operation):
    _check_secret_free(world, operation, _mcp(world, mcp, tool))


@pytest.mark.parametrize(("tool", "operation"), MCP_CASES, ids=[t for t, _ in MCP_CASES])
def test_it_never_answers_a_secret_to_the_local_stdio_agent(world, mcp, tool, operation):
    for aim in _aims_at_b(world, operation) + _aims_at_a(world, operation):
        answer = mcp.call(tool, OPERATIONS[operation].build(aim), principal=None)
        assert answer.status < 500, answer.text
        assert not any(token in answer.text for token in world.secret_tokens), answer.text[:500]


# Every read, and the session-start block: opening the same session twice writes nothing new.
# The self-concept is global, which key B does not hold: it is refused at home alike before and
# after, so it is left to the isolation case.
READS = {op for op, spec in OPERATIONS.items() if not spec.writes}
BLIND = (READS - {"self_concept_read"}) | {"session_begin"}
READ_REST_CASES = [(route, op) for route, op in REST_CASES if op in BLIND]
READ_MCP_CASES = [(tool, op) for tool, op in MCP_CASES if op in BLIND]


# Reading a memory counts an activation, so a second read of the same memory says one more.
ACTIVATIONS = re.compile(r'"activation_count": \d+')
# A block is stamped with the minute it was rendered, and two calls can straddle a minute.
BLOCK_MINUTE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d(?= [A-Z]{3})")


def _settled(text: str) -> str:
    return BLOCK_MINUTE.sub("the minute", ACTIVATIONS.sub('"activation_count": n', text))


def _narrative(scope, gesture: str, **fields) -> None:
    narrative_write(data=NarrativeInput(gesture=gesture, scope_id=scope.pk, **fields))


def _fact(scope, profile_name: str, predicate: str, value: str, **fields) -> None:
    fact_write(
        data=FactInput(
            scope_id=scope.pk,
            profile_name=profile_name,
            kind="fact",
            predicate=predicate,
            value=value,
            **fields,
        )
    )


def _conversation(scope, session_id: str, speaker: str, content: str) -> None:
    session = session_start(runtime="test", external_id=session_id, scope_id=scope.pk)
    turns_record(
        session_id=session.pk, turns=[TurnInput(role="user", speaker=speaker, content=content)]
    )


def _home_data(world: World) -> None:
    """What key B finds at home: memories, facts and a conversation that the reads answer with."""
    for number, text in enumerate(["harbour ledger audit", "ledger of the harbour fees"]):
        _narrative(world.scope_b, text, tags=["harbour"])
        _fact(world.scope_b, "user", f"harbour_{number}", text)
    _conversation(world.scope_b, "beta-home", "Aqib", "the harbour ledger is audited on Fridays")


def _more_secrets_at_home(world: World) -> None:
    for number in range(5):
        _narrative(
            world.scope_b, f"{COMMON_WORDS} vault {number}", tags=["harbour", "vault"], secret=True
        )
    _fact(world.scope_b, "vault keeper", "vault_code", COMMON_WORDS, secret=True)


def _more_in_project_a(world: World) -> None:
    for number in range(5):
        _narrative(world.scope_a, f"{COMMON_WORDS} ferry {number}", tags=["harbour"])
        _conversation(world.scope_a, f"alpha-more-{number}", "Aqeeb", f"{COMMON_WORDS} Aqib")
    _fact(world.scope_a, "user", "harbour_master", COMMON_WORDS)


def _dream() -> None:
    """DREAM's deterministic layer over everything written so far, embeddings first: what derives
    recurrence, topic and soft clusters and the entity graph between two reads."""
    memories_embed(memory_ids=list(Memory.objects.values_list("pk", flat=True)))
    script_layer_run()


def _check_unchanged_by(world: World, operation: str, call, more) -> None:
    """Key B at home answers the same before and after `more` is written where it may not look:
    nothing read off what it may not see (a score, a count, a name) changes."""
    _home_data(world)
    aims = [*_aims_at_b(world, operation), _home_target(world)]
    _dream()
    calls = [OPERATIONS[operation].build(aim) for aim in aims]
    before = [call(arguments) for arguments in calls]
    more(world)
    _dream()
    after = [call(arguments) for arguments in calls]
    assert all(answer.status < 500 for answer in before), [a.text for a in before]
    # Key B's own secret is refused alike before and after; its own plain memory is answered.
    assert any(answer.ok for answer in before), [a.text for a in before]
    assert [_settled(answer.text) for answer in after] == [
        _settled(answer.text) for answer in before
    ]


# What key B may not see: more secrets at home, more of everything in project A.
UNSEEN = pytest.mark.parametrize(
    "more", [_more_secrets_at_home, _more_in_project_a], ids=["secrets", "project A"]
)


@UNSEEN
@pytest.mark.parametrize(
    ("route", "operation"), READ_REST_CASES, ids=[" ".join(r) for r, _ in READ_REST_CASES]
)
def test_it_answers_as_if_nothing_unseen_were_written_over_rest(world, route, operation, more):
    _check_unchanged_by(world, operation, _rest(world, route), more)


@UNSEEN
@pytest.mark.parametrize(("tool", "operation"), READ_MCP_CASES, ids=[t for t, _ in READ_MCP_CASES])
def test_it_answers_as_if_nothing_unseen_were_written_over_mcp(world, mcp, tool, operation, more):
    _check_unchanged_by(world, operation, _mcp(world, mcp, tool), more)


# Every write at home: its answer is that of a store without the unseen twin. Key B holds no
# global scope, so a global-only write (the self-concept) is refused at home; the isolation case
# holds that refusal.
AT_HOME = {op for op, spec in OPERATIONS.items() if spec.writes and not spec.global_only}
WRITE_REST_CASES = [(route, op) for route, op in REST_CASES if op in AT_HOME]
WRITE_MCP_CASES = [(tool, op) for tool, op in MCP_CASES if op in AT_HOME]
# Ids, times and audit references differ between two runs of the same write; what the write
# decided, and every value it reports, must not.
RUN_SPECIFIC = re.compile(
    r'("(?:id|\w+_id|supersedes|superseded_by)": )\d+'
    r'|("\w+_ids": )\[[\d,\s]*\]'
    r"|#\d+"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:\+00:00|Z)?"
)


def _run_free(text: str) -> str:
    return RUN_SPECIFIC.sub(
        lambda match: f"{match.group(1) or match.group(2) or ''}n", _settled(text)
    )


def _home_target(world: World) -> Aim:
    """A write at home: into key B's own project, on a memory and a thread it may change."""
    narrative = narrative_write(
        data=NarrativeInput(scope_id=world.scope_b.pk, gesture="harbour ledger audit")
    )
    thread = thread_write(scope_id=world.scope_b.pk, content="harbour ledger thread")
    return Aim(
        where={"scope_id": world.scope_b.pk},
        token=token_new(),
        session_id="beta-write",
        memory_id=narrative.pk,
        thread_id=thread.pk,
    )


def _forgotten(call, arguments: dict):
    """The answer of a write that is then rolled back, so the same write can run again."""
    with transaction.atomic():
        answer = call(arguments)
        transaction.set_rollback(True)
    return answer


def _check_write_unchanged_by(world: World, operation: str, by_b, by_a, twin) -> None:
    """Key B's write at home answers the same with and without `twin` stored first where it may
    not look: no merge into it, no conflict with it, no reference to it. `by_b` and `by_a` call
    the same route or tool with key B's and project A's key, so a twin shares the interface's
    runtime (REST's "generic", MCP's "mcp") and with it the session ids."""
    aim = _home_target(world)
    arguments = OPERATIONS[operation].build(aim)
    alone = _forgotten(by_b, arguments)
    twin(world, operation, aim, by_b, by_a)
    beside = by_b(arguments)
    assert alone.ok, alone.text
    assert _run_free(beside.text) == _run_free(alone.text)


def _secret_twin_at_home(world: World, operation: str, aim: Aim, by_b, by_a) -> None:
    """The same write at home, marked secret (for the writes that take the flag)."""
    assert by_b(OPERATIONS[operation].build(dataclasses.replace(aim, secret=True))).ok


def _twin_in_project_a(world: World, operation: str, aim: Aim, by_b, by_a, header=None) -> None:
    """The same write, with the same session, turn and text, by project A's key in project A."""
    in_a = dataclasses.replace(
        aim,
        where={"scope_id": world.scope_a.pk},
        memory_id=world.open_memory_id,
        thread_id=world.thread_a_id,
    )
    answer = by_a({**OPERATIONS[operation].build(in_a), **(header or {})})
    assert answer.ok, answer.text


def _subagent_twin_in_project_a(world: World, operation: str, aim: Aim, by_b, by_a) -> None:
    """The same session id in project A, opened there by a subagent: another key's session must
    not make key B's a subagent, whose turns would then go unrecorded."""
    subagent = {"origin": "subagent", "delegation_depth": 1}
    _twin_in_project_a(world, operation, aim, by_b, by_a, header=subagent)


def _opens_a_session(operation: str) -> bool:
    return "session_id" in OPERATIONS[operation].build(Aim(where={}, token="t"))


def _unseen(more):
    """The read meta-test's unseen writes, before a write: what a write computes as it stores (a
    weight, a recurrence, the per-turn block) must not count them either."""

    def twin(world: World, operation: str, aim: Aim, by_b, by_a) -> None:
        more(world)

    return twin


def _takes_secret(operation: str) -> bool:
    aim = Aim(where={}, token="t")
    return OPERATIONS[operation].build(aim) != OPERATIONS[operation].build(
        dataclasses.replace(aim, secret=True)
    )


def _twins(cases: list[tuple]) -> list:
    return [
        pytest.param(
            entry,
            operation,
            twin,
            id=f"{entry if isinstance(entry, str) else ' '.join(entry)} {name}",
        )
        for entry, operation in cases
        for name, twin, applies in (
            ("secret twin", _secret_twin_at_home, _takes_secret),
            ("twin in A", _twin_in_project_a, None),
            ("subagent twin in A", _subagent_twin_in_project_a, _opens_a_session),
            ("secrets", _unseen(_more_secrets_at_home), None),
            ("project A", _unseen(_more_in_project_a), None),
        )
        if applies is None or applies(operation)
    ]


@pytest.mark.parametrize(("route", "operation", "twin"), _twins(WRITE_REST_CASES))
def test_it_writes_as_if_nothing_unseen_were_written_over_rest(world, route, operation, twin):
    by_a = _rest(world, route, world.a)
    _check_write_unchanged_by(world, operation, _rest(world, route), by_a, twin)


@pytest.mark.parametrize(("tool", "operation", "twin"), _twins(WRITE_MCP_CASES))
def test_it_writes_as_if_nothing_unseen_were_written_over_mcp(world, mcp, tool, operation, twin):
    by_a = _mcp(world, mcp, tool, world.principal_a)
    _check_write_unchanged_by(world, operation, _mcp(world, mcp, tool), by_a, twin)


@pytest.mark.parametrize(
    ("route", "operation"), REST_CASES, ids=[" ".join(r) for r, _ in REST_CASES]
)
def test_it_refuses_bad_input_over_rest_and_writes_nothing(world, route, operation):
    # An unknown query parameter or body field is refused like MCP's unknown arguments.
    _check_bad_input(world, operation, _rest(world, route))


@pytest.mark.parametrize(("tool", "operation"), MCP_CASES, ids=[t for t, _ in MCP_CASES])
def test_it_refuses_bad_input_over_mcp_and_writes_nothing(world, mcp, tool, operation):
    _check_bad_input(world, operation, _mcp(world, mcp, tool))


@pytest.mark.parametrize(
    ("route", "operation"), REST_CASES, ids=[" ".join(r) for r, _ in REST_CASES]
)
def test_it_answers_401_without_a_key_and_writes_nothing(world, route, operation):
    aim = Aim(where={"scope_id": world.scope_a.pk}, token=token_new(), session_id="alpha-1")
    arguments = OPERATIONS[operation].build(aim)
    for client in (Client(), Client(HTTP_AUTHORIZATION="Bearer tl_deadbeef_forged")):
        before = row_counts()
        answer = rest_call(client, route, arguments)
        assert answer.status == 401, answer.text
        assert row_counts() == before
        assert not (world.a_tokens & set(answer.text.split()))


@pytest.mark.parametrize(("tool", "operation"), MCP_CASES, ids=[t for t, _ in MCP_CASES])
def test_it_refuses_an_http_mcp_request_that_carries_no_principal(world, mcp, tool, operation):
    aim = Aim(where={"scope_id": world.scope_a.pk}, token=token_new(), session_id="alpha-1")
    arguments = OPERATIONS[operation].build(aim)
    before = row_counts()
    request = SimpleNamespace(scope={})
    answer = mcp.call_with_request(tool, arguments, request=request)
    assert answer.refused and "API key" in answer.text, answer.text
    assert row_counts() == before


def test_it_lets_the_key_of_project_a_read_what_b_may_not(world):
    """The cases above are not vacuous: the data is there for a key that may see it."""
    _, raw_a = apikey_create(name="second key of A", scope_ids=[world.scope_a.pk])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw_a}")
    listed = rest_call(client, ("GET", "/api/v1/memories"), {"scope_id": world.scope_a.pk})
    timeline = rest_call(client, ("GET", "/api/v1/timeline"), {"scope_id": world.scope_a.pk})
    threads = rest_call(client, ("GET", "/api/v1/threads"), {"scope_id": world.scope_a.pk})
    snapshots = rest_call(client, ("GET", "/api/v1/snapshots"), {"scope_id": world.scope_a.pk})
    seen = listed.text + timeline.text + threads.text + snapshots.text
    assert {token for token in world.a_tokens - world.secret_tokens if token not in seen} == set()
    assert world.global_token in threads.text
    assert not any(token in seen for token in world.secret_tokens)
    assert world.scope_a.kind == ScopeKind.PROJECT
