import json
import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from memory.bench.locomo import evidence_normalise
from memory.models import ContextTurn, Scope


def conversation(sample_id: str, a: str, b: str, lines: list[list[str]]) -> dict:
    data = {"speaker_a": a, "speaker_b": b}
    for number, session in enumerate(lines, start=1):
        data[f"session_{number}_date_time"] = f"1:56 pm on {number + 7} May, 2023"
        data[f"session_{number}"] = [
            {"speaker": (a, b)[i % 2], "dia_id": f"D{number}:{i + 1}", "text": text}
            for i, text in enumerate(session)
        ]
    return {"sample_id": sample_id, "conversation": data}


@pytest.fixture
def locomo_file(tmp_path):
    first = conversation(
        "conv-a",
        "Ann",
        "Bob",
        [
            ["I adopted a puppy last week!", "Congrats! What is its name?", "Her name is Luna."],
            ["I ran a marathon in Berlin.", "How long did it take?", "Four hours and ten minutes."],
        ],
    )
    first["conversation"]["session_1"][2]["blip_caption"] = "a photo of a small brown dog"
    first["qa"] = [
        {
            "question": "What is the name of Ann's puppy?",
            "answer": "Luna",
            "evidence": ["D1:3"],
            "category": 4,
        },
        {
            "question": "Where did Ann run a marathon?",
            "answer": "Berlin",
            "evidence": ["D2:1; D2:3"],
            "category": 1,
        },
        {
            "question": "When did Ann adopt a puppy?",
            "answer": "May 2023",
            "evidence": ["D:1:01"],
            "category": 2,
        },
        {"question": "Unanswerable", "adversarial_answer": "x", "evidence": [], "category": 5},
        {"question": "Ghost evidence", "answer": "x", "evidence": ["D9:9", "D"], "category": 3},
    ]
    second = conversation(
        "conv-b",
        "Cy",
        "Di",
        [["My sister plays the cello in an orchestra.", "Which orchestra?", "The city symphony."]],
    )
    second["qa"] = [
        {
            "question": "What instrument does Cy's sister play?",
            "answer": "cello",
            "evidence": ["D1:1"],
            "category": 4,
        },
    ]
    path = tmp_path / "locomo-mini.json"
    path.write_text(json.dumps([first, second]))
    return path


def test_it_normalises_evidence_ids():
    assert evidence_normalise(["D8:6; D9:17", "D9:1 D4:4", "D:11:26", "D30:05", "D"]) == [
        "D8:6",
        "D9:17",
        "D9:1",
        "D4:4",
        "D11:26",
        "D30:5",
    ]


@pytest.mark.django_db(transaction=True)
def test_it_runs_the_locomo_bench_end_to_end(locomo_file):
    report = StringIO()
    call_command("bench", "locomo", "--data", str(locomo_file), "--in-place", stdout=report)
    text = report.getvalue()
    assert "4 scorable questions" in text
    ours = re.search(r"Tideline turn_search\s+([\d. ]+)", text).group(1).split()
    assert [float(value) for value in ours[:4]] == [100.0, 100.0, 100.0, 100.0]
    assert "DRAGON (dense), LoCoMo paper" in text and "56.7" in text
    # Whole sessions ranked by session_search, next to the turn ranking's sessions (S@5/10/25).
    sessions = re.search(r"Tideline session_search\s+([\d. ]+)", text).group(1).split()
    assert [float(value) for value in sessions] == [100.0, 100.0, 100.0]
    assert "session_search latency: p50" in text
    for category in ("multi-hop", "temporal", "single-hop"):
        assert category in text
    assert "p50" in text and "p95" in text
    # Each conversation went into its own scope, through the real write path, embedded after commit.
    scopes = Scope.objects.filter(key__startswith="bench/locomo/")
    assert scopes.count() == 2
    turns = ContextTurn.objects.filter(scope__in=scopes)
    assert turns.count() == 9
    assert set(turns.values_list("embedding_status", flat=True)) == {"ready"}
    luna = turns.get(meta__dia_id="D1:3", scope__label="LoCoMo conv-a")
    assert luna.content.endswith("and shared a photo of a small brown dog")
    assert luna.occurred_at.isoformat().startswith("2023-05-08T13:56")


@pytest.mark.django_db(transaction=True)
def test_it_reports_both_halves_and_the_per_turn_block(locomo_file):
    report = StringIO()
    call_command(
        "bench", "locomo", "--data", str(locomo_file), "--in-place", "--block", stdout=report
    )
    text = report.getvalue()
    assert "tune half (3)" in text and "held-out half (1)" in text
    searched, shown = re.search(r"\noverall\s+([\d.]+)\s+([\d.]+)", text).groups()
    assert float(searched) > 0 and float(shown) > 0


@pytest.mark.parametrize(
    "content",
    [
        "[1]",
        '[{"conversation": 1, "qa": 2}]',
        '[{"sample_id": "x", "conversation": {}, "qa": [1]}]',
    ],
)
def test_it_refuses_a_file_that_is_not_locomo(db, tmp_path, content):
    data = tmp_path / "not-locomo.json"
    data.write_text(content)
    with pytest.raises(CommandError, match="not in LoCoMo format"):
        call_command("bench", "locomo", "--data", str(data), "--in-place", stdout=StringIO())


def test_it_refuses_a_negative_number_of_conversations(db, locomo_file):
    with pytest.raises(CommandError, match="--conversations: -1 is not between 0"):
        call_command("bench", "locomo", "--data", str(locomo_file), "--conversations", "-1")
