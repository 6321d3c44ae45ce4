"""Which day a DREAM run reads, and what it keeps once per day: the nightly run (beat or the
command) covers the day that ended, a scope's dream is keyed on the DREAM day it is for (not on the
day it was written), what combing learns for a secret self-concept field stays secret, and a
secret never decides how the clusters an agent reads are fitted."""

import json
import threading
from datetime import date, datetime, time, timedelta
from unittest import mock

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from dream import llm_layers
from dream.models import DreamRun
from dream.pipeline import dream_run
from dream.script_layer import soft_assign
from dream.tasks import dream_daily
from memory.models import Actor, Memory, Narrative, SelfConcept
from memory.services.llm import llm_config_load
from memory.services.narratives import NarrativeInput, narrative_commit, narrative_write
from memory.services.self_concept import self_concept_current, self_concept_write
from tests.fakes.llm_server import json_answer, slow_answer, text_answer


def _at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=timezone.get_current_timezone())


def _recorded(narrative: Narrative, at: datetime) -> Narrative:
    Memory.objects.filter(pk=narrative.pk).update(recorded_at=at)
    return narrative


def _combed_ids(fake_llm) -> set[int]:
    """The ids of the day's memories the combing prompts so far carried; forgets them."""
    ids = {
        item["id"]
        for request in fake_llm.requests
        for item in json.loads(request["body"]["messages"][1]["content"])["today"]
    }
    fake_llm.requests.clear()
    return ids


def dream_answer(source_id: int, **fields) -> dict:
    return {
        "symbols": ["lantern", "river", "key"],
        "gesture": "A lantern drifted down a river of keys",
        "story": "Each key dissolved into the water as the lantern passed.",
        "emotional": 3,
        "unresolved": 2,
        "source_ids": [source_id],
        **fields,
    }


# --- the nightly run covers the day that ended ------------------------------------------------


def test_it_combs_every_day_exactly_once_from_the_nightly_beat_run(
    fake_llm, project_scope, write_narrative
):
    """Before, beat's 03:30 run read the day just begun: what was recorded after one night's run
    and before midnight was never combed nor dreamt."""
    today = timezone.localdate()
    yesterday = today - timedelta(days=1)
    afternoon_before = _recorded(
        write_narrative(project_scope, "The alpha index moved to PostgreSQL"), _at(yesterday, 15)
    )
    small_hours = _recorded(
        write_narrative(project_scope, "A late fix for the importer's retries"), _at(today, 2)
    )
    afternoon = _recorded(
        write_narrative(project_scope, "The owner reviewed the release checklist"), _at(today, 15)
    )
    fake_llm.script(json_answer({}), json_answer({}))

    nights = {}
    for night in (today, today + timedelta(days=1)):
        with mock.patch("django.utils.timezone.now", return_value=_at(night, 3, 30)):
            # Exactly what beat sends: no day.
            run = DreamRun.objects.get(pk=dream_daily.apply(kwargs={"layer": "combing"}).get())
        assert run.stats["layers"]["combing"]["status"] == "ok"
        nights[run.day] = _combed_ids(fake_llm)

    assert nights == {yesterday: {afternoon_before.pk}, today: {small_hours.pk, afternoon.pk}}


def test_it_makes_the_command_cover_the_day_that_ended_unless_told_a_day(
    fake_llm, project_scope, write_narrative
):
    """`manage.py dream` from cron at the small hours is the nightly run as much as beat's."""
    today = timezone.localdate()
    yesterday = today - timedelta(days=1)
    before = _recorded(
        write_narrative(project_scope, "The alpha index moved to PostgreSQL"), _at(yesterday, 15)
    )
    now = write_narrative(project_scope, "The owner reviewed the release checklist")
    fake_llm.script(json_answer({}), json_answer({}))

    with mock.patch("django.utils.timezone.now", return_value=_at(today, 3, 30)):
        call_command("dream", "--layer", "combing", "--json")
    assert _combed_ids(fake_llm) == {before.pk}
    call_command("dream", "--layer", "combing", "--day", today.isoformat(), "--json")
    assert _combed_ids(fake_llm) == {now.pk}

    assert list(DreamRun.objects.order_by("pk").values_list("day", flat=True)) == [yesterday, today]


def test_it_reads_the_rest_of_a_day_that_a_run_read_while_it_was_going(
    fake_llm, project_scope, write_narrative
):
    """Found in review: a run for today (`--day` today, or a release's last run that read the day
    just begun) marked the day's layers done, and the nightly run skipped everything recorded
    after it. The nightly run reads what was recorded since that run started; a run after the
    day ended still makes it done."""
    today = timezone.localdate()
    tomorrow = today + timedelta(days=1)
    morning = _recorded(
        write_narrative(project_scope, "The alpha index moved to PostgreSQL"), _at(today, 9)
    )
    fake_llm.script(json_answer({}), json_answer({}))

    with mock.patch("django.utils.timezone.now", return_value=_at(today, 12)):
        dream_run(layer="combing", day=today, trigger="command")
    at_noon = _combed_ids(fake_llm)
    evening = _recorded(
        write_narrative(project_scope, "The owner reviewed the release checklist"), _at(today, 20)
    )
    for _ in range(2):
        with mock.patch("django.utils.timezone.now", return_value=_at(tomorrow, 3, 30)):
            nightly = DreamRun.objects.get(pk=dream_daily.apply(kwargs={"layer": "combing"}).get())
    after_midnight = _combed_ids(fake_llm)

    assert at_noon == {morning.pk}
    assert after_midnight == {evening.pk}
    assert "already done" in nightly.stats["layers"]["combing"]["reason"]


# --- one dream per scope per DREAM day --------------------------------------------------------


@pytest.fixture
def past_day(project_scope, other_project_scope, write_narrative):
    """Two days ago: material in two scopes, dreamt about today (a back-fill, or a retry)."""
    day = timezone.localdate() - timedelta(days=2)
    at = _at(day, 15)
    first = _recorded(write_narrative(project_scope, "The alpha importer retries twice"), at)
    second = _recorded(write_narrative(other_project_scope, "Beta billing failed on leap days"), at)
    return {"day": day, project_scope.pk: first, other_project_scope.pk: second}


def _dreams(scope) -> list[Narrative]:
    return list(Narrative.objects.filter(scope=scope, ntype="dream").order_by("pk"))


def test_it_dreams_a_past_day_once_per_scope_however_often_it_runs(
    fake_llm, project_scope, other_project_scope, past_day
):
    """Before, the once-a-day guard looked for a dream recorded on the DREAM day, but a dream is
    recorded when it is made: a retry of a past day dreamt it again."""
    day = past_day["day"]
    # Busiest first, then by id: the first project is asked first. Its dream is written, the
    # other scope's answer is garbage, so the layer is partial and the retry asks again.
    fake_llm.script(
        json_answer(dream_answer(past_day[project_scope.pk].pk)), text_answer("not json at all")
    )
    first = dream_run(layer="dream", day=day)
    assert first.stats["layers"]["dream"]["status"] == "partial"

    fake_llm.script(json_answer(dream_answer(past_day[other_project_scope.pk].pk)))
    retry = dream_run(layer="dream", day=day)

    scopes = retry.stats["layers"]["dream"]["scopes"]
    assert scopes[str(project_scope.pk)] == {
        "status": "skipped",
        "reason": f"already dreamt for {day}",
    }
    assert scopes[str(other_project_scope.pk)]["status"] == "ok"
    assert len(fake_llm.requests) == 3
    for scope in (project_scope, other_project_scope):
        [dream] = _dreams(scope)
        assert f"dream-day:{day}" in dream.tags


def test_it_still_dreams_today_after_back_filling_a_past_day(
    fake_llm, project_scope, past_day, write_narrative
):
    """Before, the back-filled dream, recorded today, counted as today's dream."""
    fake_llm.script(json_answer(dream_answer(past_day[project_scope.pk].pk)))
    dream_run(layer="dream", day=past_day["day"])
    today = write_narrative(project_scope, "Today the alpha search latency halved")
    fake_llm.script(json_answer(dream_answer(today.pk, symbols=["owl", "ledger", "bridge"])))

    run = dream_run(layer="dream", day=timezone.localdate())

    assert run.stats["layers"]["dream"]["scopes"][str(project_scope.pk)]["status"] == "ok"
    assert sorted(tag for d in _dreams(project_scope) for tag in d.tags if "dream-day:" in tag) == [
        f"dream-day:{past_day['day']}",
        f"dream-day:{timezone.localdate()}",
    ]


def _dream_elsewhere(scope, day: date) -> Narrative:
    """The scope's dream for `day`, as another run writes it."""
    return narrative_write(
        data=NarrativeInput(
            scope_id=scope.pk,
            gesture="Another run's dream",
            context="It was written first.",
            importance=1,
            ntype="dream",
            tags=["dream", f"dream-day:{day}"],
        ),
        actor=Actor.LLM,
    )


def test_it_writes_no_second_dream_when_the_days_dream_lands_while_the_llm_dreams(
    fake_llm, project_scope, write_narrative
):
    """Another run (one whose lease ran out while it stalled) may write the scope's dream for the
    day after this run found none and before its LLM answers: the check is made again, with the
    write, and this run writes nothing."""
    today = write_narrative(project_scope, "The alpha importer retries twice")
    day = timezone.localdate()
    fake_llm.script(json_answer(dream_answer(today.pk)))
    asked = llm_layers._ask

    def ask_while_another_run_dreams(name, material, **kwargs):
        _dream_elsewhere(project_scope, day)
        return asked(name, material, **kwargs)

    with mock.patch("dream.llm_layers._ask", side_effect=ask_while_another_run_dreams):
        run = dream_run(layer="dream", day=day)

    assert run.stats["layers"]["dream"]["scopes"][str(project_scope.pk)] == {
        "status": "skipped",
        "reason": f"already dreamt for {day}",
    }
    assert [d.gesture for d in _dreams(project_scope)] == ["Another run's dream"]


def test_it_lets_one_of_two_overlapping_dream_layers_write_a_scopes_dream_for_a_day(
    transactional_db, fake_llm, project_scope, write_narrative
):
    """Both layers found no dream for the day and asked the LLM at once; the first to write holds
    the scope's row until its dream is stored, so the second sees it and writes none."""
    today = write_narrative(project_scope, "The alpha importer retries twice")
    day = timezone.localdate()
    fake_llm.script(
        slow_answer(0.5, dream_answer(today.pk, gesture="The first dream")),
        slow_answer(0.5, dream_answer(today.pk, gesture="The second dream")),
    )
    config = llm_config_load()
    outcomes: list[dict] = []
    barrier = threading.Barrier(2)
    committed = narrative_commit

    def slow_commit(**kwargs):
        # After the check, inside the transaction: without the lock both would be here at once.
        threading.Event().wait(0.5)
        return committed(**kwargs)

    def layer() -> None:
        barrier.wait()
        try:
            outcomes.append(llm_layers.dream_layer(day=day, config=config).as_stats())
        finally:
            connection.close()

    with mock.patch("dream.llm_layers.narrative_commit", side_effect=slow_commit):
        threads = [threading.Thread(target=layer) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

    assert len(fake_llm.requests) == 2
    assert sorted(bool(outcome["written"]) for outcome in outcomes) == [False, True]
    assert len(_dreams(project_scope)) == 1


# --- secrecy of what combing learns -----------------------------------------------------------


def test_it_keeps_secret_what_combing_learns_for_a_secret_self_concept_field(
    fake_llm, global_scope, write_narrative
):
    """Before, the new version was written plain: it superseded the owner's secret one and was
    injected everywhere. As with facts, the key keeps the secrecy the owner gave it."""
    self_concept_write(
        field="terrain",
        content="I work mostly on the owner's private medical-records tooling",
        secret=True,
        actor=Actor.OWNER,
    )
    write_narrative(global_scope, "The owner spent the day planning a garden irrigation system")
    learnt = "I help the owner with home and garden projects"
    fake_llm.script(
        json_answer({"self_concept": [{"field": "terrain", "content": learnt}]}),
        json_answer({"self_concept": [{"field": "terrain", "content": learnt}]}),
    )

    run = dream_run(layer="combing")
    again = dream_run(layer="combing", force=True)

    assert "medical-records" not in json.dumps(fake_llm.requests[0]["body"])
    current = SelfConcept.objects.get(field="terrain", status="active")
    assert current.content == learnt and current.secret
    assert run.stats["layers"]["combing"]["written"] == {"self_concept": [current.pk]}
    # Restating it changes nothing: the LLM's value is compared with the secret it replaced.
    assert again.stats["layers"]["combing"]["written"] == {"self_concept": [current.pk]}
    assert SelfConcept.objects.count() == 2
    assert self_concept_current(field="terrain") == current


def test_it_answers_an_agent_restating_a_secret_self_concept_as_if_none_were_stored(db):
    """The other half of the facts' rule: an agent's content is never compared with a secret
    version (a "same content" answer would confirm its guess); it replaces it in plain."""
    guessed = "I work mostly on the owner's private medical-records tooling"
    secret = self_concept_write(field="terrain", content=guessed, secret=True, actor=Actor.OWNER)

    written = self_concept_write(field="terrain", content=guessed, actor=Actor.AGENT)

    assert written.pk != secret.pk and not written.secret
    secret.refresh_from_db()
    assert secret.status == "superseded" and secret.superseded_by_id == written.pk


# --- soft clusters: what decides the algorithm ------------------------------------------------


def test_it_picks_the_kmeans_algorithm_on_the_vectors_it_fits(settings):
    """Before, the choice counted the secrets placed after the fit, so one secret written at the
    threshold switched to mini-batches and reshaped every cluster an agent reads."""
    settings.TIDELINE_DREAM_KMEANS_FULL_MAX = 40
    vectors = np.random.default_rng(7).normal(size=(41, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    visible = np.ones(41, dtype=bool)
    visible[-1] = False  # the one secret

    alone = soft_assign(vectors[:40])
    with_secret = soft_assign(vectors, fit=visible)

    np.testing.assert_array_equal(with_secret[0], alone[0])
    np.testing.assert_array_equal(with_secret[1][:40], alone[1])
