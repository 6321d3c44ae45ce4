import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memory.bench.realmem_memories import memory_queries, memory_text
from memory.models import Memory, Scope

TRAINING = "User trains 30 minutes twice a week, on Saturday and Sunday."
SISTER = "User's sister visits Lisbon next month."
ITINERARY = {"trip": "Lisbon", "days": [{"day": 1, "city": "Lisbon"}]}


def session(uuid, day, turns, memories):
    return {
        "session_identifier": uuid,
        "session_uuid": uuid,
        "current_time": f"2025-12-{day:02d} (Thursday)",
        "dialogue_turns": turns,
        "extracted_memory": [
            {"index": f"{uuid}-{n}", "content": c} for n, c in enumerate(memories)
        ],
    }


def user(text, category=None):
    turn = {"speaker": "User", "is_query": "False", "content": text}
    if category:
        turn.update(is_query="True", category_name=category)
    return turn


def assistant(text, used=None):
    turn = {"speaker": "Assistant", "is_query": "False", "content": text}
    if used is not None:
        turn["memory_used"] = used
    return turn


@pytest.fixture
def realmem_dir(tmp_path):
    dialogues = [
        session(
            "aaa",
            1,
            [user("I can train 30 minutes twice a week."), assistant("Saturday and Sunday.")],
            [TRAINING],
        ),
        session(
            "bbb",
            2,
            [user("My sister is visiting Lisbon."), assistant("Lovely.")],
            [SISTER, ITINERARY],
        ),
        session(
            "ccc",
            3,
            [
                user("Can we move my weekend training to weekdays?", "Dynamic Updating"),
                # RealMem writes memory_used as a Python list literal in a string.
                assistant("Sure.", str([{"session_uuid": "aaa", "content": TRAINING}])),
                user("What did we plan for the Lisbon trip?", "Implicit Preference"),
                assistant(
                    "Day one in Lisbon.",
                    [
                        {"session_uuid": "bbb", "content": SISTER},
                        {"session_uuid": "bbb", "content": ITINERARY},
                    ],
                ),
                # Only its own session's memory was used, and one no session extracted.
                user("ignored", "Dynamic Updating"),
                assistant(
                    "x",
                    [
                        {"session_uuid": "ccc", "content": "User moved training."},
                        {"session_uuid": "aaa", "content": "never extracted"},
                    ],
                ),
            ],
            ["User moved training."],
        ),
    ]
    data = {"_metadata": {"person_name": "Test Person"}, "dialogues": dialogues}
    (tmp_path / "Test_Person_dialogues_256k.json").write_text(json.dumps(data))
    return tmp_path


def test_it_scores_a_query_by_the_earlier_memories_its_answer_used(realmem_dir):
    dialogues = json.loads((realmem_dir / "Test_Person_dialogues_256k.json").read_text())[
        "dialogues"
    ]
    assert memory_queries(dialogues) == [
        (2, "Dynamic Updating", "Can we move my weekend training to weekdays?", ["aaa/0"]),
        (2, "Implicit Preference", "What did we plan for the Lisbon trip?", ["bbb/0", "bbb/1"]),
    ]


def test_it_keeps_a_structured_memory_as_its_json():
    assert memory_text("plain") == "plain"
    assert json.loads(memory_text(ITINERARY)) == ITINERARY


@pytest.mark.django_db(transaction=True)
def test_it_runs_the_memory_level_bench_end_to_end(realmem_dir):
    report = StringIO()
    call_command(
        "bench", "realmem-memories", "--data", str(realmem_dir), "--in-place", stdout=report
    )
    text = report.getvalue()
    assert "2 scorable queries, 4 memories" in text
    # R@5, R@10, all@5, all@10, MRR: three memories were stored before the queries, so every
    # gold memory is in anyone's top 5; the first is at the top for both.
    ours = re.search(r"Tideline memory_search\s+([\d. ]+)", text).group(1).split()
    assert [float(value) for value in ours[:4]] == [1.0, 1.0, 1.0, 1.0]
    assert float(ours[4]) == 1.0
    floor = re.search(r"plain BM25, memories\s+([\d. ]+)", text).group(1).split()
    assert [float(value) for value in floor[:4]] == [1.0, 1.0, 1.0, 1.0]
    block = re.search(r"overall\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", text).groups()
    assert float(block[0]) == 1.0 and float(block[2]) == 1.0
    assert "Dynamic Updating (1)" in text and "Implicit Preference (1)" in text
    assert "p50" in text
    scope = Scope.objects.get(key__startswith="bench/realmem-memories/")
    stored = Memory.objects.filter(scope=scope)
    assert stored.count() == 4
    assert stored.filter(search_text=TRAINING).exists()
    assert stored.filter(search_text__contains='"trip": "Lisbon"').exists()


@pytest.mark.django_db
def test_it_refuses_a_directory_without_realmem_files(tmp_path):
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(CommandError, match="not in RealMem format"):
        call_command("bench", "realmem-memories", "--data", str(tmp_path), "--in-place")
    with pytest.raises(CommandError, match="no RealMem dialogue files"):
        call_command("bench", "realmem-memories", "--data", str(tmp_path / "none"), "--in-place")
