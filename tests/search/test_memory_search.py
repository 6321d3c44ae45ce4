from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import Actor, AttentionEvent, Memory, MemoryStatus
from memory.search import memory_search
from memory.services.edits import memory_update
from memory.services.errors import InvalidInput


def ids(hits):
    return [hit.memory.pk for hit in hits]


def test_it_finds_a_two_character_chinese_word(project_scope, write_narrative):
    target = write_narrative(project_scope, "处理边界条件时先写兜底逻辑")
    write_narrative(project_scope, "今天把数据库迁移到了新的服务器")
    hits = memory_search(query="边界", scope_ids=[project_scope.pk])
    assert hits[0].memory.pk == target.pk
    assert "边界" in hits[0].why["matched_terms"]
    assert memory_search(query="兜底", scope_ids=[project_scope.pk])[0].memory.pk == target.pk


def test_it_finds_a_person_by_the_given_name_in_a_conversation(project_scope, write_narrative):
    target = write_narrative(project_scope, "用户的女朋友林雨桐对海鲜过敏")
    write_narrative(project_scope, "用户打算明年换一台新电脑")
    write_narrative(project_scope, "用户每天早上喝一杯拿铁")
    query = "用户：这周末带雨桐去吃饭，哪家餐厅比较适合？\n助手：好的，我来帮你想想。"
    hits = memory_search(query=query, scope_ids=[project_scope.pk], semantic=False)
    assert ids(hits)[:1] == [target.pk]
    assert "雨桐" in hits[0].why["matched_terms"]


def test_it_reads_the_latest_turns_of_a_conversation_too_long_to_read_whole(
    project_scope, write_narrative
):
    """Before, only the first 20,000 characters of a query were read: the turns just said, at the
    end of a long conversation, were not."""
    target = write_narrative(project_scope, "The user's Corolla needs new brake pads")
    write_narrative(project_scope, "The user walks the dog every morning")
    chatter = "user: how was your day?\nassistant: fine, thanks for asking.\n" * 400
    query = chatter + "user: the Corolla squeaks when I brake, what should I check?"
    assert len(query) > 20_000

    hits = memory_search(query=query, scope_ids=[project_scope.pk], semantic=False)

    assert ids(hits)[:1] == [target.pk]


def test_it_searches_a_query_holding_a_lone_surrogate_by_meaning_too(
    project_scope, write_narrative
):
    target = write_narrative(project_scope, "The user's Corolla needs new brake pads")
    hits = memory_search(query="car brakes \ud800 squeak", scope_ids=[project_scope.pk])
    assert ids(hits) == [target.pk] and hits[0].semantic is not None


def test_it_finds_neovim_from_nvim_by_meaning(project_scope, write_narrative):
    target = write_narrative(project_scope, "写代码用 neovim")
    write_narrative(project_scope, "周末去海边散步，天气很好")
    write_narrative(project_scope, "数据库备份每天凌晨三点运行")
    hits = memory_search(query="编辑器是 nvim", scope_ids=[project_scope.pk])
    assert hits and hits[0].memory.pk == target.pk
    assert hits[0].why["matched_terms"] == []
    assert hits[0].semantic is not None and hits[0].why["cosine"] == pytest.approx(
        hits[0].semantic, abs=1e-3
    )


def test_it_ranks_an_exact_keyword_over_a_semantically_closer_memory(
    project_scope, write_narrative
):
    literal = write_narrative(project_scope, "Deployed whale-listen to the staging cluster")
    closer = write_narrative(
        project_scope, "The whale listening service keeps a microphone open for whale songs"
    )
    hits = memory_search(query="whale-listen", scope_ids=[project_scope.pk])
    assert ids(hits)[:2] == [literal.pk, closer.pk]
    assert hits[0].why["literal_matches"] == ["whale-listen"]
    assert hits[0].why["boosts"]["keyword"] > 0
    semantic_only = memory_search(query="whale-listen", scope_ids=[project_scope.pk], lexical=False)
    assert semantic_only[0].memory.pk == closer.pk


def test_it_filters_by_event_time_with_since_and_until(project_scope, write_narrative):
    now = timezone.now()
    old = write_narrative(
        project_scope,
        "Released version one of the archive tool",
        valid_from=now - timedelta(days=40),
    )
    recent = write_narrative(
        project_scope,
        "Released version two of the archive tool",
        valid_from=now - timedelta(days=2),
    )
    query = "released archive tool"
    assert set(ids(memory_search(query=query, scope_ids=[project_scope.pk]))) == {old.pk, recent.pk}
    since = memory_search(query=query, scope_ids=[project_scope.pk], since=now - timedelta(days=7))
    assert ids(since) == [recent.pk]
    until = memory_search(query=query, scope_ids=[project_scope.pk], until=now - timedelta(days=7))
    assert ids(until) == [old.pk]


def test_it_never_leaks_across_scopes(project_scope, other_project_scope, write_narrative):
    mine = write_narrative(project_scope, "The billing export runs on Sundays")
    theirs = write_narrative(other_project_scope, "The billing export runs on Mondays")
    assert ids(memory_search(query="billing export", scope_ids=[project_scope.pk])) == [mine.pk]
    assert ids(memory_search(query="billing export", scope_ids=[other_project_scope.pk])) == [
        theirs.pk
    ]
    assert memory_search(query="billing export", scope_ids=[]) == []


def test_it_finds_a_japanese_memory_with_a_spanish_query(project_scope, write_narrative):
    target = write_narrative(project_scope, "ユーザーは毎朝コーヒーを飲みながらメールを確認する")
    write_narrative(project_scope, "サーバーのディスク容量が足りなくなった")
    write_narrative(project_scope, "新しいデータベースのスキーマを設計した")
    hits = memory_search(query="¿Qué bebe el usuario por la mañana?", scope_ids=[project_scope.pk])
    assert hits and hits[0].memory.pk == target.pk


def test_it_matches_spanish_typed_without_its_accents_and_the_reverse(
    project_scope, write_narrative
):
    """Before, "reunion en Logrono" matched no word of "reunión … Logroño" (only the cosine found
    it, behind other meetings), nor "café de Begoña" a memory typed as "cafe de Begona"."""
    accented = write_narrative(project_scope, "La reunión trimestral con el señor Muñoz en Logroño")
    plain = write_narrative(project_scope, "El cafe de Begona en Cordoba abre a las siete")
    write_narrative(project_scope, "La reunión anual con la señora Gómez en Jaén")
    write_narrative(project_scope, "El café de Martín en Cádiz cierra los lunes")

    unaccented = memory_search(query="reunion con Munoz en Logrono", scope_ids=[project_scope.pk])
    assert unaccented[0].memory.pk == accented.pk
    assert {"reunion", "munoz", "logrono"} <= set(unaccented[0].why["matched_terms"])
    with_accents = memory_search(query="café de Begoña", scope_ids=[project_scope.pk])
    assert with_accents[0].memory.pk == plain.pk
    assert "begona" in with_accents[0].why["matched_terms"]


def test_it_matches_traditional_and_simplified_chinese_both_ways(project_scope, write_narrative):
    """Before, "台湾的会议资料" shared no term with "臺灣的會議資料" (jieba kept the traditional
    words whole or cut them into characters) and its literal was never found verbatim."""
    traditional = write_narrative(project_scope, "下週在臺灣開會，會議資料放在共享盤")
    simplified = write_narrative(project_scope, "新电脑的键盘坏了，周五送修")
    write_narrative(project_scope, "周末去上海看展览，顺便买了一本书")

    hits = memory_search(query="台湾开会的会议资料", scope_ids=[project_scope.pk], semantic=False)
    assert hits[0].memory.pk == traditional.pk
    assert {"台湾", "开会", "会议", "资料"} <= set(hits[0].why["matched_terms"])
    hits = memory_search(query="新電腦的鍵盤", scope_ids=[project_scope.pk], semantic=False)
    assert hits[0].memory.pk == simplified.pk
    assert hits[0].why["literal_matches"] == ["新電腦的鍵盤"]


@pytest.mark.parametrize(
    ("query", "words"),
    [("新幹線", {"新干线"}), ("誕生日", {"诞生", "日"}), ("来週月曜日", {"来周", "月曜日"})],
)
def test_it_finds_japanese_written_with_kana_by_a_query_in_kanji_alone(
    project_scope, write_narrative, query, words
):
    """A query with no kana is read as Chinese (jieba's words) and the text around kana as bigrams:
    before, "新幹線" was one term that "新幹線で" (新幹, 幹線, 線で) never held, and 誕生日 was 誕 +
    生日, of which the text held only 生日."""
    text = "来週の月曜日に新幹線で大阪へ行き、誕生日のケーキを買う"
    target = write_narrative(project_scope, text)
    write_narrative(project_scope, "金曜日の会議で新しい予算の資料を配った")

    hits = memory_search(query=query, scope_ids=[project_scope.pk], semantic=False)
    assert hits[0].memory.pk == target.pk
    assert words <= set(hits[0].why["matched_terms"])
    assert hits[0].why["literal_matches"] == ([query] if query in text else [])


@pytest.mark.parametrize("hidden", ["\u200b", "\u00ad", "\u2060", "\ufeff"])
def test_it_reads_a_word_split_by_an_invisible_character_as_the_word(
    project_scope, write_narrative, hidden
):
    """Before, a zero-width space or soft hyphen split a word in two, in a stored text and in a
    query alike, and neither matched the word."""
    target = write_narrative(
        project_scope, f"The vault code is kept by Bar{hidden}nabas in a cabinet"
    )
    write_narrative(project_scope, "Whiskers the cat sleeps in the redwood cabinet")

    for query, expected in [("Barnabas", target.pk), (f"Whis{hidden}kers", None)]:
        hits = memory_search(query=query, scope_ids=[project_scope.pk], semantic=False)
        assert hits, query
        assert expected is None or hits[0].memory.pk == expected
        assert hits[0].why["matched_terms"] == [query.replace(hidden, "").lower().rstrip("s")]


def test_it_finds_keyword_hits_with_the_none_provider(project_scope, write_narrative, settings):
    settings.TIDELINE_EMBEDDER = "none"
    target = write_narrative(project_scope, "The staging database password rotates monthly")
    write_narrative(project_scope, "Lunch was good today")
    assert Memory.objects.get(pk=target.pk).embedding_status == "disabled"
    hits = memory_search(query="when does the password rotate", scope_ids=[project_scope.pk])
    assert ids(hits) == [target.pk]
    assert hits[0].semantic is None


def test_it_shows_what_was_valid_at_a_past_moment(project_scope, write_fact):
    old = write_fact(project_scope, "editor", "vim")
    between = timezone.now()
    new = write_fact(project_scope, "editor", "helix")
    old.refresh_from_db()
    assert old.status == MemoryStatus.SUPERSEDED
    assert ids(memory_search(query="editor", scope_ids=[project_scope.pk])) == [new.pk]
    assert ids(memory_search(query="editor", scope_ids=[project_scope.pk], as_of=between)) == [
        old.pk
    ]


def test_it_tells_an_edited_past_once_as_it_is_known_now(
    project_scope, write_narrative, django_capture_on_commit_callbacks
):
    """Before, a search of the past found the old telling of an edited narrative beside its
    correction: the edit keeps when the event happened, so both were valid then."""
    happened = timezone.now() - timedelta(days=3)
    told = write_narrative(
        project_scope, "Reviewed the Kettle release with Mallory", valid_from=happened
    )
    with django_capture_on_commit_callbacks(execute=True):
        retold = memory_update(
            memory=told,
            changes={"gesture": "Reviewed the Kettle release with Mallory and Bob"},
            actor=Actor.AGENT,
        )
    moved = write_narrative(project_scope, "Kettle release notes moved to the wiki")
    scope = [project_scope.pk]

    then = memory_search(
        query="Kettle release", scope_ids=scope, as_of=happened + timedelta(days=1)
    )

    assert ids(then) == [retold.pk]
    assert set(ids(memory_search(query="Kettle release", scope_ids=scope))) == {
        retold.pk,
        moved.pk,
    }
    history = memory_search(query="Kettle release", scope_ids=scope, statuses=["superseded"])
    assert ids(history) == [told.pk]


def test_it_filters_by_type_layer_and_tag(project_scope, write_narrative, write_fact):
    decision = write_narrative(
        project_scope, "We chose Redis for the queue", layer="decision", tags=["infra"]
    )
    experience = write_narrative(project_scope, "Redis crashed during the demo", tags=["demo"])
    fact = write_fact(project_scope, "queue_backend", "Redis")
    scope = [project_scope.pk]
    assert set(ids(memory_search(query="redis", scope_ids=scope))) == {
        decision.pk,
        experience.pk,
        fact.pk,
    }
    assert ids(memory_search(query="redis", scope_ids=scope, memory_types=["fact"])) == [fact.pk]
    assert ids(memory_search(query="redis", scope_ids=scope, layers=["decision"])) == [decision.pk]
    assert ids(memory_search(query="redis", scope_ids=scope, tags=["Demo"])) == [experience.pk]


def test_it_counts_an_activation_and_logs_attention(project_scope, write_narrative):
    target = write_narrative(project_scope, "The nightly backup moved to 3 am")
    memory_search(query="nightly backup", scope_ids=[project_scope.pk])
    target.refresh_from_db()
    assert target.activation_count == 0
    hits = memory_search(
        query="nightly backup", scope_ids=[project_scope.pk], activation_source="mcp_search"
    )
    target.refresh_from_db()
    assert target.activation_count == 1 and target.last_activated is not None
    event = AttentionEvent.objects.get(memory=target)
    assert event.source == "mcp_search"
    assert event.similarity == pytest.approx(hits[0].semantic)


def test_it_excludes_expired_memories_by_default(project_scope, write_narrative):
    from memory.services.lifecycle import memory_expire

    target = write_narrative(project_scope, "The old VPN endpoint is vpn1.example.org")
    memory_expire(memory_id=target.pk, reason="moved")
    assert memory_search(query="vpn endpoint", scope_ids=[project_scope.pk]) == []
    expired = memory_search(
        query="vpn endpoint", scope_ids=[project_scope.pk], statuses=["expired"]
    )
    assert ids(expired) == [target.pk]


def test_it_refuses_bad_input(project_scope):
    with pytest.raises(InvalidInput):
        memory_search(query="x", scope_ids=[project_scope.pk], limit=0)
    with pytest.raises(InvalidInput):
        memory_search(query="x", scope_ids=[project_scope.pk], statuses=["bogus"])
    with pytest.raises(InvalidInput):
        memory_search(query="x", scope_ids=None)


def test_it_leaves_out_excluded_ids_before_ranking(global_scope, write_narrative):
    first = write_narrative(global_scope, "We tuned the lighthouse lamp")
    second = write_narrative(global_scope, "The lighthouse lamp was tuned again")
    everything = memory_search(query="lighthouse lamp", scope_ids=[global_scope.pk])
    assert set(ids(everything)) == {first.pk, second.pk}
    hits = memory_search(
        query="lighthouse lamp", scope_ids=[global_scope.pk], exclude_ids={first.pk}
    )
    assert ids(hits) == [second.pk]


def test_it_word_indexes_only_the_head_of_a_huge_text():
    from memory.search.text import INDEXED_TEXT_MAX_CHARS, text_terms

    head = "边界条件的兜底逻辑 " * (INDEXED_TEXT_MAX_CHARS // 10)
    huge = head[:INDEXED_TEXT_MAX_CHARS] + "尾巴里的独特词汇" * 5000

    assert text_terms(huge) == text_terms(head[:INDEXED_TEXT_MAX_CHARS])


def test_it_finds_a_memory_by_an_emoji(project_scope, write_narrative):
    """Before, emoji were no terms: a search for "🔥" matched no word of any memory."""
    target = write_narrative(project_scope, "The deploy is 🔥 today, all hands on the release")
    write_narrative(project_scope, "The deploy is calm today, nothing to watch")

    hits = memory_search(query="🔥", scope_ids=[project_scope.pk], semantic=False)

    assert ids(hits) == [target.pk]
    assert hits[0].why["matched_terms"] == ["🔥"]


def test_it_ranks_a_chinese_memory_above_chatter_sharing_only_a_generic_word(
    project_scope, write_narrative
):
    """Before, 有时候 was three terms (有时, 时候, 有时候): chatter that said it outranked the
    memory that shared the dialogue's topic word (跑步)."""
    target = write_narrative(project_scope, "用户去年冬天跑步时右膝受伤，医生建议跑前先热身")
    write_narrative(project_scope, "用户觉得最近生活很忙，就是有时候觉得有点累，不过还是很满意")

    hits = memory_search(
        query="我有时候跑步膝盖会疼，怎么办？", scope_ids=[project_scope.pk], semantic=False
    )

    assert ids(hits) == [target.pk]
