import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memory.bench.realmem import bm25_sessions_ranked, persona_queries
from memory.models import ContextTurn, Scope


def session(uuid, day, turns):
    return {
        "session_identifier": uuid,
        "session_uuid": uuid,
        "current_time": f"2025-12-{day:02d} (Thursday)",
        "dialogue_turns": turns,
        "extracted_memory": [{"content": "never indexed"}],
    }


def user(text, **fields):
    return {
        "speaker": "User",
        "is_query": fields.pop("is_query", "False"),
        "content": text,
        **fields,
    }


def assistant(text, gold=None):
    turn = {"speaker": "Assistant", "is_query": False, "content": text}
    if gold is not None:
        turn["memory_session_uuids"] = gold
    return turn


@pytest.fixture
def realmem_dir(tmp_path):
    dialogues = [
        session(
            "aaa",
            1,
            [
                user("I want a fitness plan; I can train 30 minutes twice a week."),
                assistant("A plan with two 30-minute sessions on Saturday and Sunday."),
            ],
        ),
        session(
            "bbb",
            2,
            [
                user("My sister is visiting Lisbon next month."),
                assistant("Lisbon is lovely in spring."),
            ],
        ),
        session(
            "ccc",
            3,
            [
                user(
                    "Can we adjust my weekend fitness sessions?",
                    is_query="True",
                    category_name="Dynamic Updating",
                ),
                assistant("Sure.", gold="['aaa']"),
                user(
                    "And what about the trip?", is_query=True, category_name="Implicit Preference"
                ),
                assistant("It is close.", gold=["bbb"]),
                # Gold in its own session: not scorable.
                user("ignored", is_query="True", category_name="Dynamic Updating"),
                assistant("x", gold="['ccc']"),
            ],
        ),
    ]
    data = {"_metadata": {"person_name": "Test Person"}, "dialogues": dialogues}
    (tmp_path / "Test_Person_dialogues_256k.json").write_text(json.dumps(data))
    return tmp_path


def test_it_keeps_only_queries_whose_gold_is_earlier(realmem_dir):
    data = json.loads((realmem_dir / "Test_Person_dialogues_256k.json").read_text())
    found = persona_queries(data["dialogues"])
    assert [(n, category, gold) for n, category, _, gold in found] == [
        (2, "Dynamic Updating", ["aaa"]),
        (2, "Implicit Preference", ["bbb"]),
    ]


def test_it_ranks_the_earlier_sessions_by_plain_bm25_for_the_floor(realmem_dir):
    dialogues = json.loads((realmem_dir / "Test_Person_dialogues_256k.json").read_text())[
        "dialogues"
    ]
    dialogues.append(
        session("ddd", 4, [user("Which fitness sessions did I skip?", is_query="True")])
    )
    dialogues.append(session("eee", 5, [assistant("Answer.", gold="['aaa', 'ddd']")]))
    queries = [(3, "Dynamic Updating", "Which fitness sessions did I skip?", ["aaa"])]
    queries.append((2, "Implicit Preference", "And what about the trip?", ["bbb"]))
    ranked = bm25_sessions_ranked(dialogues, queries)
    # Only sessions before the query's own; the fitness session has both of its rarer words.
    assert ranked[0] == ["aaa", "ccc", "bbb"]
    # No stop words: "and", "what" and "the" are all it can match, so the trip's session
    # (which shares none of them) comes last, as plain BM25 puts it.
    assert ranked[1] == ["aaa", "bbb"]


@pytest.mark.django_db(transaction=True)
def test_it_runs_the_realmem_bench_end_to_end(realmem_dir):
    report = StringIO()
    call_command(
        "bench", "realmem", "--data", str(realmem_dir), "--in-place", "--block", stdout=report
    )
    text = report.getvalue()
    assert "2 scorable queries" in text
    ours = re.search(r"Tideline turn_search\s+([\d. ]+)", text).group(1).split()
    assert float(ours[0]) == 1.0
    sessions = re.search(r"Tideline session_search\s+([\d. ]+)", text).group(1).split()
    assert float(sessions[0]) == 1.0
    assert "session_search p50" in text
    # R@5, R@10, all@5, all@10, MRR: the trip's session is plain BM25's second (see above).
    floor = re.search(r"plain BM25, sessions\s+([\d. ]+)", text).group(1).split()
    assert [float(value) for value in floor] == [1.0, 1.0, 1.0, 1.0, 0.75]
    # Two sessions fit in anyone's top 5, so no slice is above the floor at R@5.
    assert "not above plain BM25 in: overall, Dynamic Updating, Implicit Preference" in text
    for category in ("Dynamic Updating", "Implicit Preference"):
        assert category in text
    assert "search" in text and "block" in text and "p50" in text
    scope = Scope.objects.get(key__startswith="bench/realmem/")
    # The query's own session is imported only after its queries were asked.
    turns = ContextTurn.objects.filter(scope=scope)
    assert turns.count() == 10
    assert not turns.filter(content__contains="never indexed").exists()


@pytest.mark.django_db(transaction=True)
def test_it_limits_the_realmem_bench_to_named_personas_and_their_first_sessions(realmem_dir):
    other = {"_metadata": {}, "dialogues": [session("zzz", 1, [user("unrelated persona")])]}
    (realmem_dir / "Other_Person_dialogues_256k.json").write_text(json.dumps(other))
    report = StringIO()
    # Two sessions: the queries sit in the third, so none is left to score.
    call_command(
        "bench",
        "realmem",
        "--data",
        str(realmem_dir),
        "--in-place",
        "--persona",
        "Test_",
        "--sessions",
        "2",
        stdout=report,
    )
    assert "0 scorable queries" in report.getvalue()
    assert Scope.objects.filter(key__startswith="bench/realmem/").count() == 1
    assert ContextTurn.objects.filter(content="unrelated persona").count() == 0
    assert ContextTurn.objects.count() == 4
    with pytest.raises(CommandError, match="no persona matches"):
        call_command("bench", "realmem", "--data", str(realmem_dir), "--persona", "Nobody")
