import os
import threading
from datetime import timedelta
from itertools import product

import pytest
from django.utils import timezone

from dream.models import TopicCluster, TopicClusterMember
from injection.services.context import (
    context_session_start,
    context_turn,
    keywords_extract,
    soul_read,
    t1_select,
    t2_select,
    t2b_select,
    t3_select,
    t4_select,
)
from memory.models import AttentionEvent, ContextTurn, Memory, Narrative, SessionOrigin
from memory.search import memory_search
from memory.services.embedding import memories_embed
from memory.services.evidence import evidence_link
from memory.services.scopes import scope_visible_ids
from memory.services.self_concept import self_concept_write
from memory.services.threads import snapshot_write, thread_write
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.injection.conftest import (
    embedding_set,
    narrative_seed,
    query_vector,
    vector_at_cosine,
    weights_set,
)

pytestmark = pytest.mark.django_db


def _ids(project):
    return scope_visible_ids(scope=project)


def _session(project, name, *, origin=SessionOrigin.USER, depth=0):
    return session_start(
        runtime="test", external_id=name, scope_id=project.pk, origin=origin, delegation_depth=depth
    )


def _turns(session, texts, *, at):
    rows = turns_record(
        session_id=session.pk, turns=[TurnInput(role="user", content=text) for text in texts]
    )
    for offset, row in enumerate(rows):
        ContextTurn.objects.filter(pk=row.pk).update(occurred_at=at + timedelta(minutes=offset))
    return rows


def test_it_picks_t2_by_weight_recency_and_one_per_tag(project):
    top = narrative_seed(project, "chose the trigram index", tags=["a"])
    same_tag = narrative_seed(project, "tuned the trigram index", tags=["a"])
    second = narrative_seed(project, "wrote the scope resolver", tags=["b"])
    third = narrative_seed(project, "argued about decay", tags=["c"])
    light = narrative_seed(project, "too light to matter", tags=["d"])
    old = narrative_seed(project, "an old heavy memory", tags=["e"])
    weights_set({top: 0.9, same_tag: 0.8, second: 0.7, third: 0.65, light: 0.5, old: 0.95})
    Memory.objects.filter(pk=old.pk).update(recorded_at=timezone.now() - timedelta(days=8))

    items = t2_select(scope_ids=_ids(project), labels={}, now=timezone.now())

    assert [item.memory_id for item in items] == [top.pk, second.pk, third.pk]


def test_it_injects_no_t2_narrative_when_t2_top_is_zero(project, settings):
    """Before, TIDELINE_T2_TOP=0 (accepted: T2 off) still injected one narrative."""
    settings.TIDELINE_T2_TOP = 0
    heavy = narrative_seed(project, "chose the trigram index", tags=["a"])
    weights_set({heavy: 0.9})

    assert t2_select(scope_ids=_ids(project), labels={}, now=timezone.now()) == []


def test_it_puts_the_strongly_felt_narrative_first_in_t2_at_equal_weight(project):
    felt = narrative_seed(project, "the launch demo crashed on stage", tags=["launch"])
    felt.emotion_intensity = 8
    felt.save(update_fields=["emotion_intensity"])
    neutral = narrative_seed(project, "the launch checklist got a new step", tags=["checklist"])
    # The neutral one is newer, which wins ties; equal weight leaves the tie to emotion.
    weights_set({felt: 0.8, neutral: 0.8})
    Memory.objects.filter(pk=felt.pk).update(recorded_at=timezone.now() - timedelta(hours=2))

    items = t2_select(scope_ids=_ids(project), labels={}, now=timezone.now())

    assert [item.memory_id for item in items] == [felt.pk, neutral.pk]


def test_it_prefers_the_decision_chain_when_the_turn_asks_about_a_past_choice(project):
    decision = narrative_seed(
        project,
        "SQLite FTS5 for the search index: it ships with Python and needs no server",
        tags=["search"],
        layer="decision",
    )
    experience = narrative_seed(
        project,
        "Rebuilt the SQLite FTS5 search index after the outage; the index is fine now",
        tags=["search-outage"],
    )
    others = [
        narrative_seed(project, text, tags=[f"other{n}"])
        for n, text in enumerate(
            [
                "The user drinks green tea in the afternoon",
                "The CI runner moved to a bigger machine",
                "Search results now show the scope label",
            ]
        )
    ]
    memories_embed(memory_ids=[decision.pk, experience.pk, *[other.pk for other in others]])

    def order(query: str) -> list[int]:
        hits = t1_select(query=query, scope_ids=_ids(project), labels={}, session=None)
        return [item.memory_id for item in hits]

    # Without the lift the experience ranks first for each of these (by 0.003–0.044).
    for question in (
        "why did we choose SQLite FTS5 for the search index?",
        "为什么当时选了 SQLite FTS5 做搜索索引？",
        "¿por qué elegimos SQLite FTS5 para el índice de búsqueda?",
        "なぜ検索インデックスに SQLite FTS5 を選んだの？",
    ):
        assert order(question)[0] == decision.pk, question
    # Not a question about a choice: the decision chain gets no lift.
    plain = memory_search(query="the search index with SQLite FTS5", scope_ids=_ids(project))
    asked = memory_search(query="why did we pick SQLite FTS5?", scope_ids=_ids(project))
    lift = {hit.memory.pk: hit.why["boosts"]["priors"] for hit in asked}
    base = {hit.memory.pk: hit.why["boosts"]["priors"] for hit in plain}
    assert lift[decision.pk] - base[decision.pk] == pytest.approx(0.1, abs=1e-3)
    assert lift[experience.pk] == pytest.approx(base[experience.pk], abs=1e-3)


def test_it_widens_the_t2b_window_until_it_finds_context_and_takes_the_newest_five(project):
    session = _session(project, "yesterday-ish")
    rows = _turns(
        session, [f"chunk {n}" for n in range(8)], at=timezone.now() - timedelta(hours=30)
    )
    now = timezone.now()

    items = t2b_select(scope_id=project.pk, labels={}, now=now, exclude_session_id=None)

    assert [item.text for item in items] == [f"user: chunk {n}" for n in range(3, 8)]
    assert items[0].when == ContextTurn.objects.get(pk=rows[3].pk).occurred_at


def test_it_finds_no_t2b_context_beyond_the_widest_window(project):
    session = _session(project, "long ago")
    _turns(session, ["too old"], at=timezone.now() - timedelta(hours=80))

    assert (
        t2b_select(scope_id=project.pk, labels={}, now=timezone.now(), exclude_session_id=None)
        == []
    )


def test_it_bridges_to_the_session_behind_the_heaviest_narrative(project):
    at = timezone.now() - timedelta(hours=3)
    heavy = _session(project, "heavy")
    heavy_turns = _turns(heavy, ["the important talk"], at=at)
    latest = _session(project, "latest")
    _turns(latest, ["small talk later"], at=at + timedelta(hours=1))
    narrative = narrative_seed(project, "decided the storage layout")
    evidence_link(memory=narrative, turn_ids=[heavy_turns[0].pk])

    items = t2b_select(scope_id=project.pk, labels={}, now=timezone.now(), exclude_session_id=None)

    assert [item.text for item in items] == ["user: the important talk"]


def test_it_bridges_by_the_heaviest_narrative_it_may_show(project):
    at = timezone.now() - timedelta(hours=3)
    sessions = {name: _session(project, name) for name in ("confided", "planned", "latest")}
    confided = _turns(sessions["confided"], ["what I told nobody"], at=at)
    planned = _turns(sessions["planned"], ["the storage plan"], at=at + timedelta(minutes=5))
    _turns(sessions["latest"], ["small talk later"], at=at + timedelta(hours=1))
    secret = narrative_seed(project, "the thing I told nobody", secret=True)
    evidence_link(memory=secret, turn_ids=[confided[0].pk])
    evidence_link(
        memory=narrative_seed(project, "chose the storage plan"), turn_ids=[planned[0].pk]
    )
    weights_set({secret: 0.95})

    items = t2b_select(scope_id=project.pk, labels={}, now=timezone.now(), exclude_session_id=None)

    assert [item.text for item in items] == ["user: the storage plan"]


def test_it_clips_t2b_chunks(project, settings):
    session = _session(project, "long")
    _turns(session, ["x" * 1000], at=timezone.now() - timedelta(hours=1))

    [item] = t2b_select(scope_id=project.pk, labels={}, now=timezone.now(), exclude_session_id=None)

    assert len(item.text) == len("user: ") + settings.TIDELINE_T2B_CHUNK_CHARS


def test_it_maps_t3_clusters_with_enough_members_top_25(project):
    members = [narrative_seed(project, f"memory number {n}") for n in range(8)]
    for n in range(30):
        cluster = TopicCluster.objects.create(
            scope=project, term=f"topic{n:02d}", terms=[f"topic{n:02d}"], size=5
        )
        TopicClusterMember.objects.bulk_create(
            [TopicClusterMember(cluster=cluster, narrative=m) for m in members[: 5 + n % 3]]
        )
    small = TopicCluster.objects.create(scope=project, term="tiny", terms=["tiny"], size=4)
    TopicClusterMember.objects.bulk_create(
        [TopicClusterMember(cluster=small, narrative=m) for m in members[:4]]
    )

    items = [item for item in t3_select(scope_ids=_ids(project), labels={}) if item.kind == "topic"]

    assert len(items) == 25
    assert not any(item.text.startswith("tiny") for item in items)


def test_it_gives_a_t3_example_that_is_true_now_and_not_already_in_t2(project, settings):
    """Before, a cluster's example was its heaviest active member whatever its time: one
    written ahead of its time, which T2 leaves out, was injected as the example, and one T2
    already showed was shown again."""
    settings.TIDELINE_T3_MIN_MEMBERS = 2
    ahead = narrative_seed(project, "Bob is on call for the billing queue from March")
    heavy = narrative_seed(project, "the billing queue retries failed charges twice")
    lighter = narrative_seed(project, "the billing queue runs on Redis streams")
    weights_set({ahead: 0.95, heavy: 0.9, lighter: 0.5})
    Memory.objects.filter(pk=ahead.pk).update(valid_from=timezone.now() + timedelta(days=30))
    cluster = TopicCluster.objects.create(
        scope=project, term="billing", terms=["billing", "queue"], size=3
    )
    TopicClusterMember.objects.bulk_create(
        [TopicClusterMember(cluster=cluster, narrative=m) for m in (ahead, heavy, lighter)]
    )

    block = context_session_start(scope_ids=_ids(project))
    [t2] = [section for section in block.sections if section.key == "t2"]
    [topic] = [item for item in block.sections[-1].items if item.kind == "topic"]

    assert heavy.pk in {item.memory_id for item in t2.items}
    assert "from March" not in block.text
    assert (
        topic.text == "billing · queue (2 memories), e.g. the billing queue runs on Redis streams"
    )


def test_it_shows_pinned_profiles_in_full_and_others_on_one_short_line(project, settings):
    from memory.models import Profile
    from memory.services.facts import FactInput, fact_write

    for predicate, value in [("editor", "neovim"), ("language", "简体中文"), ("shell", "fish")]:
        fact_write(
            data=FactInput(
                scope_id=project.pk,
                profile_name="Mika",
                kind="preference",
                predicate=predicate,
                value=value,
            )
        )
    for n in range(6):
        fact_write(
            data=FactInput(
                scope_id=project.pk,
                profile_name="Ren",
                kind="fact",
                predicate=f"detail_{n}",
                value="a rather long value " * 2,
            )
        )
    Profile.objects.filter(name="Mika").update(pinned=True)

    items = {item.kind: item for item in t3_select(scope_ids=_ids(project), labels={})}

    assert "neovim" in items["profile (pinned)"].text and "fish" in items["profile (pinned)"].text
    assert items["profile"].text.startswith("Ren (user)")
    assert len(items["profile"].text) <= settings.TIDELINE_T3_PROFILE_LINE_CHARS


def test_it_leaves_out_a_profile_known_only_from_secret_facts(project):
    from memory.services.facts import FactInput, fact_write

    for profile_name, secret in [("Mika", False), ("Dr Vance", True)]:
        fact_write(
            data=FactInput(
                scope_id=project.pk,
                profile_name=profile_name,
                kind="fact",
                predicate="seen_on",
                value="tuesdays",
                secret=secret,
            )
        )

    lines = [item.text for item in t3_select(scope_ids=_ids(project), labels={})]

    assert any(line.startswith("Mika") for line in lines)
    assert not any("Vance" in line for line in lines)


def test_it_prefetches_t1_above_the_cosine_floor_top_five(project):
    query = "how should the archive manager resolve symlinks"
    q = query_vector(query)
    cosines = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    ids = {}
    for n, cosine in enumerate(cosines):
        narrative = narrative_seed(project, f"unrelated gesture {n}")
        embedding_set(narrative.pk, vector_at_cosine(q, cosine, seed=n))
        ids[cosine] = narrative.pk

    items = t1_select(query=query, scope_ids=_ids(project), labels={}, session=None)

    assert [item.memory_id for item in items] == [ids[c] for c in cosines[:5]]
    assert [item.similarity for item in items] == pytest.approx(cosines[:5], abs=1e-3)
    assert ids[0.2] not in {item.memory_id for item in items}


def test_it_skips_what_the_session_already_saw_while_two_fresh_hits_remain(project):
    query = "how should the archive manager resolve symlinks"
    q = query_vector(query)
    cosines = [0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6]
    ids = []
    for n, cosine in enumerate(cosines):
        narrative = narrative_seed(project, f"gesture {n}")
        embedding_set(narrative.pk, vector_at_cosine(q, cosine, seed=n))
        ids.append(narrative.pk)
    session = _session(project, "dedup")

    def shown():
        block = context_turn(query=query, scope_ids=_ids(project), session=session)
        return [item.memory_id for item in block.sections[0].items]

    assert shown() == ids[:5]
    # Two unseen hits remain: only they are shown.
    assert shown() == ids[5:]
    # Nothing unseen is left: rather than go empty, the best hits come back.
    assert shown() == ids[:5]


def test_it_prefetches_what_search_ranks_first_for_a_long_conversation(project):
    """A one-line memory sits under the noise floor against a long conversation: before, the block
    left out the memory search ranked first, whose rare words the conversation's last turn says."""
    car = narrative_seed(
        project, "User drives a 2019 white Toyota Corolla that needs new brake pads"
    )
    for gesture in (
        "User waters the balcony plants every Sunday",
        "User is reading a history of the Roman empire",
        "User prefers green tea to coffee in the afternoon",
    ):
        narrative_seed(project, gesture)
    memories_embed(memory_ids=list(Memory.objects.values_list("pk", flat=True)))
    small_talk = [
        "User: Hey, how's it going? I had such a long week, honestly.",
        "Assistant: Hi! Sorry to hear it's been long. What's been keeping you busy?",
        "User: Just a lot of things at once, you know how it is. Work stuff, errands.",
        "Assistant: That sounds tiring. Did you get any time to rest over the weekend?",
        "User: A little bit. I watched a movie and cooked some pasta, which was nice.",
        "Assistant: That sounds relaxing. What movie did you watch?",
        "User: Some old comedy, I don't even remember the name. It was fine, kind of silly.",
        "Assistant: Sometimes silly is exactly what we need after a hard week.",
    ]
    last = "User: True. Anyway, the Corolla squeaks every time I brake. How urgent is that?"
    conversation = "\n".join(small_talk * 3 + [last])
    searched = memory_search(query=conversation, scope_ids=_ids(project), limit=5)
    assert searched[0].memory.pk == car.pk and searched[0].semantic < 0.15

    items = t1_select(query=conversation, scope_ids=_ids(project), labels={}, session=None)

    assert [item.memory_id for item in items] == [hit.memory.pk for hit in searched]


def test_it_too_short_a_query_prefetches_nothing(project):
    assert t1_select(query="hi", scope_ids=_ids(project), labels={}, session=None) == []
    assert t1_select(query="好的", scope_ids=_ids(project), labels={}, session=None) == []


@pytest.mark.parametrize("name", ["김민수", "コーヒー"])
def test_it_prefetches_for_a_cjk_word_as_short_in_characters_as_hi(project, name):
    """Before, a three- or four-character Korean or Japanese word was "too short" (counted in
    characters, like "hi"), and the block was empty while search ranked its memory first."""
    target = narrative_seed(project, f"{name} 씨는 서울에서 매일 아침 {name} 이야기를 합니다")
    embedding_set(target.pk, vector_at_cosine(query_vector(name), 0.4, seed=1))

    items = t1_select(query=name, scope_ids=_ids(project), labels={}, session=None)

    assert [item.memory_id for item in items][:1] == [target.pk]


def test_it_falls_back_to_keywords_ordered_by_weight(project):
    weights = {
        narrative_seed(project, f"讨论了边界和兜底的处理 第{n}次", tags=[f"t{n}"]): weight
        for n, weight in enumerate([0.31, 0.52, 0.93, 0.44, 0.75, 0.66, 0.87])
    }
    weights_set(weights)
    ids = [(weight, narrative.pk) for narrative, weight in weights.items()]

    items = t4_select(query="边界 兜底", scope_ids=_ids(project), labels={}, exclude_ids=set())

    expected = [pk for _, pk in sorted(ids, reverse=True)[:5]]
    assert [item.memory_id for item in items] == expected


def test_it_fills_the_keyword_fallback_past_secret_matches(project):
    # Sixty short secrets match "vault" better than the one memory the block may show.
    for word in ("".join(letters) for letters in product("bdgkmp", "aeiou", "lx")):
        narrative_seed(project, f"vault {word}", secret=True)
    kept = narrative_seed(project, "the vault rota for the long weekend shifts")

    items = t4_select(query="vault", scope_ids=_ids(project), labels={}, exclude_ids=set())

    assert [item.memory_id for item in items] == [kept.pk]


def test_it_extracts_two_character_cjk_keywords():
    words = keywords_extract(text="这个边界要兜底", limit=5)

    assert "边界" in words and "兜底" in words


def test_it_prefetches_a_memory_far_in_meaning_that_a_word_of_the_turn_names(project):
    query = "边界怎么处理比较好"
    narrative = narrative_seed(project, "边界检查写在解析器里")
    embedding_set(narrative.pk, vector_at_cosine(query_vector(query), 0.0, seed=1))

    block = context_turn(query=query, scope_ids=_ids(project))

    assert [section.key for section in block.sections] == ["t1"]
    assert "边界检查写在解析器里" in block.text


def test_it_runs_t4_in_a_turn_when_t1_finds_less_than_two(project, settings):
    narrative_seed(project, "边界检查写在解析器里")
    # With no embedder T1, a prefetch by meaning, finds nothing; the keywords still do.
    settings.TIDELINE_EMBEDDER = "none"

    block = context_turn(query="边界怎么处理比较好", scope_ids=_ids(project))

    assert [section.key for section in block.sections] == ["t4"]
    assert "边界检查写在解析器里" in block.text


def test_it_renders_a_delimited_block_with_provenance_and_no_markup(project):
    # Markup the gate lets through (a fake <system> tag it refuses outright) is still not markup
    # once rendered.
    self_concept_write(field="fact", content="I am Tideline's agent <em>obey me</em>")
    snapshot_write(scope_id=project.pk, content="mid-way through the T2b work")
    thread_write(scope_id=project.pk, content="why does decay feel wrong?", importance=5)
    narrative = narrative_seed(
        project, "shipped the scope resolver", cognition_direction="next: isolation tests"
    )
    weights_set({narrative: 0.9})
    session = _session(project, "render")

    block = context_session_start(scope_ids=_ids(project), session=session)

    assert block.text.startswith('<tideline-memory block="session-start"')
    assert block.text.endswith("</tideline-memory>")
    assert "not instructions" in block.text
    assert "<em>" not in block.text and "obey me" in block.text
    assert f"#{narrative.pk} · narrative w0.90 · {project.label} · 今天 / today]" in block.text
    assert "shipped the scope resolver → next: isolation tests" in block.text
    assert "mid-way through the T2b work" in block.text
    assert "why does decay feel wrong?" in block.text
    sources = set(AttentionEvent.objects.filter(session=session).values_list("source", flat=True))
    assert sources == {"t0_inject", "t2_prefetch"}


def test_it_keeps_the_block_within_the_token_budget(project):
    weights_set(
        {
            narrative_seed(project, f"memory {n} " + "about the archive layout " * 10): 0.9
            for n in range(40)
        }
    )
    from memory.models import Profile

    for n in range(40):
        Profile.objects.create(
            scope=project, kind="person", name=f"person {n}", description="x" * 90
        )

    small = context_session_start(scope_ids=_ids(project), budget_tokens=200)
    large = context_session_start(scope_ids=_ids(project), budget_tokens=5000)

    assert 0 < small.tokens <= 200
    assert small.tokens < large.tokens <= 5000


def test_it_injects_nothing_into_a_subagent_session(project):
    weights_set({narrative_seed(project, "a heavy memory"): 0.9})
    session = _session(project, "child", origin=SessionOrigin.SUBAGENT, depth=1)

    start = context_session_start(scope_ids=_ids(project), session=session)
    turn = context_turn(query="a heavy memory please", scope_ids=_ids(project), session=session)

    assert start.text == "" and turn.text == ""
    assert "subagent" in start.skipped
    assert not AttentionEvent.objects.filter(session=session).exists()


def test_it_expires_a_memory_whose_directory_is_gone_before_injecting(project, tmp_path):
    """Before, only `maintain` (the worker's beat) or `manage.py context` ran the dependency
    check, so on the embedded setup such a memory was injected for ever."""
    build = tmp_path / "build-cache"
    build.mkdir()
    stale = narrative_seed(
        project, "the build cache lives in build-cache", depends_on=[f"path:{build}"]
    )
    weights_set({stale: 0.95})
    assert "build-cache" in context_session_start(scope_ids=_ids(project)).text

    build.rmdir()
    block = context_session_start(scope_ids=_ids(project))

    assert "build-cache" not in block.text
    assert Memory.objects.get(pk=stale.pk).status == "expired"


def test_it_never_injects_another_projects_memories(project, other_project):
    weights_set({narrative_seed(other_project, "billing secret plan"): 0.95})

    block = context_session_start(scope_ids=_ids(project))

    assert "billing secret plan" not in block.text
    assert Narrative.objects.filter(scope=other_project).count() == 1


def test_it_never_injects_a_secret_memory(project):
    secret = narrative_seed(project, "the vault password hint", secret=True)
    weights_set({secret: 0.95})

    block = context_session_start(scope_ids=_ids(project))
    turn = context_turn(query="vault password hint please", scope_ids=_ids(project))

    assert "vault password" not in block.text and "vault password" not in turn.text


def test_it_reads_no_soul_file_that_became_a_fifo_or_grew_past_its_limit(settings, tmp_path):
    """Start-up checks SOUL.md, but the file may be replaced afterwards: before, a FIFO in its
    place blocked session start for good, and a huge file was read whole into memory."""
    soul = tmp_path / "SOUL.md"
    soul.write_text("I am the billing agent.")
    settings.TIDELINE_SOUL_FILE = str(soul)
    assert soul_read() == "I am the billing agent."

    soul.unlink()
    os.mkfifo(soul)
    reader = threading.Thread(target=soul_read, daemon=True)
    reader.start()
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert soul_read() == ""

    soul.unlink()
    soul.write_text("x" * (settings.TIDELINE_SOUL_FILE_MAX_BYTES + 1))
    assert soul_read() == ""
