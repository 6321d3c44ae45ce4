"""One concurrent writer for the invariant tests: its own process, its own Django, its own
connection to the test database (TIDELINE_DATABASE_URL). It reads one JSON command a line on stdin
— an operation, its arguments and the moment to start — waits for that moment so every writer
starts together, runs the operation through the real services and prints one JSON outcome line.

    python -m tests.memory.writer
"""

import json
import sys
import time

import django


def _facts_write(*, scope_id: int, writes: list[list[str]]) -> list[int]:
    from memory.services.facts import FactInput, fact_write

    return [
        fact_write(
            data=FactInput(
                scope_id=scope_id,
                profile_name="user",
                kind="preference",
                predicate=predicate,
                value=value,
            )
        ).pk
        for predicate, value in writes
    ]


def _self_concept_write(*, field: str, contents: list[str]) -> list[int]:
    from memory.services.self_concept import self_concept_write

    return [self_concept_write(field=field, content=content).pk for content in contents]


def _session_ref(*, scope_id: int, session: str):
    from injection.services.sync import SessionRef

    return SessionRef(runtime="claude_code", external_id=session, scope_id=scope_id)


def _turns_sync(*, scope_id: int, session: str, turns: list[list[str]]) -> int:
    from injection.services.sync import session_open, turns_sync
    from memory.services.timeline import TurnInput

    opened = session_open(ref=_session_ref(scope_id=scope_id, session=session), actor="agent")
    result = turns_sync(
        session=opened,
        turns=[
            TurnInput(role="user", content=content, meta={"external_id": turn_id})
            for turn_id, content in turns
        ],
        actor="agent",
        scope_ids_readable=None,
    )
    return len(result.recorded)


def _turns_one_by_one(*, scope_id: int, session: str, contents: list[str]) -> int:
    """What a runtime does on every user prompt: open the session, record one turn."""
    from injection.services.sync import session_open, turns_sync
    from memory.services.timeline import TurnInput

    recorded = 0
    for content in contents:
        opened = session_open(ref=_session_ref(scope_id=scope_id, session=session), actor="agent")
        result = turns_sync(
            session=opened,
            turns=[TurnInput(role="user", content=content)],
            actor="agent",
            scope_ids_readable=None,
        )
        recorded += len(result.recorded)
    return recorded


def _memory_edit(*, memory_id: int, changes: dict) -> int:
    from memory.models import Memory
    from memory.services.edits import memory_update

    return memory_update(memory=Memory.objects.get(pk=memory_id), changes=changes, actor="agent").pk


def _memory_expire(*, memory_id: int) -> int:
    from memory.services.lifecycle import memory_expire

    return memory_expire(memory_id=memory_id, actor="agent", reason="race").pk


def _memories_activate(*, memory_ids: list[int], times: int) -> int:
    from memory.services.attention import memories_activate

    return sum(memories_activate(memory_ids=memory_ids, source="race") for _ in range(times))


def _words_embed(*, texts: list[str]) -> int:
    from memory.services.embedding import words_embed

    return words_embed(texts=texts)


OPERATIONS = {
    "facts_write": _facts_write,
    "self_concept_write": _self_concept_write,
    "turns_sync": _turns_sync,
    "turns_one_by_one": _turns_one_by_one,
    "memory_edit": _memory_edit,
    "memory_expire": _memory_expire,
    "memories_activate": _memories_activate,
    "words_embed": _words_embed,
}


def main() -> None:
    django.setup()
    from django.db import connections

    from memory.services.errors import TidelineError

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        time.sleep(max(0.0, command["start_at"] - time.time()))
        try:
            outcome = {"ok": True, "result": OPERATIONS[command["operation"]](**command["args"])}
        except TidelineError as exc:
            outcome = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
        except Exception as exc:  # reported to the test, which fails on anything but a clean answer
            outcome = {"ok": False, "error": type(exc).__name__, "message": repr(exc)}
        finally:
            connections.close_all()
        print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
