import json
from datetime import timedelta

from django.core.management import call_command
from django.utils import timezone

from dream.scanner import chunks_find, scan_markdown, scan_run, turns_chunk
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.timeline import TurnInput, session_start, turns_record


def record(scope, external_id, minutes, *, start=None, depth=0):
    session = session_start(
        runtime="test", external_id=external_id, scope_id=scope.pk, delegation_depth=depth
    )
    start = start or timezone.now()
    return turns_record(
        session_id=session.pk,
        turns=[
            TurnInput(
                role="user" if index % 2 == 0 else "assistant",
                content=f"turn {index} about the archive manager",
                occurred_at=start + timedelta(minutes=offset),
            )
            for index, offset in enumerate(minutes)
        ],
    )


def test_it_chunks_turns_where_gaps_stay_within_ten_minutes(project_scope):
    turns = record(project_scope, "s1", [0, 1, 2, 17, 18])
    chunks = chunks_find()
    assert len(chunks) == 1
    assert chunks[0].turn_ids == [turn.pk for turn in turns[:3]]
    assert chunks[0].scope_id == project_scope.pk


def test_it_splits_on_a_gap_of_more_than_ten_minutes_but_not_exactly_ten():
    start = timezone.now()
    pairs = [(i, start + timedelta(minutes=m)) for i, m in enumerate([0, 10, 20, 31, 32, 33])]
    assert turns_chunk(pairs, gap_minutes=10, min_turns=3) == [[0, 1, 2], [3, 4, 5]]
    assert turns_chunk(pairs, gap_minutes=10, min_turns=4) == []


def test_it_leaves_out_cited_turns_and_subagents_but_finds_turns_older_than_any_narrative(
    project_scope,
):
    old = record(project_scope, "old", [0, 1, 2], start=timezone.now() - timedelta(hours=5))
    # An agent's narrative written after the old conversation, citing none of it.
    narrative_write(
        data=NarrativeInput(scope_id=project_scope.pk, gesture="We planned the archive manager")
    )
    cited = record(project_scope, "cited", [0, 1, 2])
    narrative_write(
        data=NarrativeInput(
            scope_id=project_scope.pk,
            gesture="We fixed the path bug",
            source_turn_ids=[turn.pk for turn in cited],
        )
    )
    record(project_scope, "sub", [0, 1, 2], depth=1)
    fresh = record(project_scope, "fresh", [0, 1, 2])
    chunk_ids = [chunk.turn_ids for chunk in chunks_find()]
    assert chunk_ids == [[turn.pk for turn in old], [turn.pk for turn in fresh]]
    # --since narrows to recent turns, still skipping cited turns and subagents.
    since_ids = [c.turn_ids for c in chunks_find(since=timezone.now() - timedelta(hours=1))]
    assert since_ids == [[turn.pk for turn in fresh]]


def test_it_finds_unprocessed_turns_older_than_the_projects_newest_narrative(project_scope):
    """Issue 10.8: coverage is per turn. An agent's narrative written today does not hide the
    conversation of last week that nobody solidified."""
    week_ago = timezone.now() - timedelta(days=7)
    unprocessed = record(project_scope, "last-week", [0, 2, 4, 6], start=week_ago)
    for gesture in ("The agent noted the release plan", "The agent noted the deploy window"):
        narrative_write(data=NarrativeInput(scope_id=project_scope.pk, gesture=gesture))
    chunks = chunks_find()
    assert [chunk.turn_ids for chunk in chunks] == [[turn.pk for turn in unprocessed]]
    assert chunks[0].scope_id == project_scope.pk
    assert scan_run()["track_b"]["turns"] == 4


def test_it_reports_the_four_tracks_as_json_and_markdown(project_scope, capsys):
    narrative = narrative_write(
        data=NarrativeInput(scope_id=project_scope.pk, gesture="A narrative with no source")
    )
    turns = record(project_scope, "s1", [0, 1, 2])
    report = scan_run()
    assert report["track_a"]["narrative_ids"] == [narrative.pk]
    assert report["track_b"]["chunks"][0]["turn_ids"] == [turn.pk for turn in turns]
    assert report["track_c"]["narrative_ids"] == [narrative.pk]  # embedding still pending
    assert report["track_d"]["turn_ids"] == [turn.pk for turn in turns]
    markdown = scan_markdown(report)
    assert "## Track A · narratives without source links (1)" in markdown
    assert "A narrative with no source" in markdown
    assert f"context ids {', '.join(str(t.pk) for t in turns)}" in markdown

    call_command("dream", "scan", "--json")
    printed = json.loads(capsys.readouterr().out)
    assert printed["track_b"]["count"] == 1
    call_command("dream", "scan")
    assert "# Layer 0 scan" in capsys.readouterr().out


def test_it_never_puts_two_scopes_in_one_chunk_when_a_session_moved(
    project_scope, other_project_scope
):
    from memory.models import ContextTurn

    turns = record(project_scope, "moving", [0, 1, 2, 3, 4, 5])
    moved = [turn.pk for turn in turns[3:]]
    ContextTurn.objects.filter(pk__in=moved).update(scope=other_project_scope)
    chunks = chunks_find()
    assert [(chunk.scope_id, chunk.turn_ids) for chunk in chunks] == [
        (project_scope.pk, [turn.pk for turn in turns[:3]]),
        (other_project_scope.pk, moved),
    ]
