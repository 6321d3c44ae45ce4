from dream.models import NarrativeKeywords, TopicCluster
from dream.script_layer import keywords_extract, terms_filter, topic_clusters_rebuild
from dream.selectors import topic_clusters_read
from memory.models import AuditEvent, Memory

FILLER = [
    *("apple", "bridge", "candle", "desert", "engine", "forest", "garden", "hammer", "island"),
    *("jacket", "kettle", "ladder", "meadow", "needle", "orchard", "pepper", "quarry", "ribbon"),
    *("saddle", "timber"),
]


def test_it_keeps_a_term_in_three_of_twenty_and_drops_generic_and_rare_terms(
    global_scope, write_narrative
):
    for index, filler in enumerate(FILLER):
        words = [filler]
        if index < 3:
            words.append("whale")
        if 3 <= index < 8:
            words.append("harbor")
        if 8 <= index < 10:
            words.append("lantern")
        write_narrative(global_scope, " ".join(words))
    stats = topic_clusters_rebuild()
    clusters = {c.term: c for c in TopicCluster.objects.all()}
    assert set(clusters) == {"whale"}
    assert clusters["whale"].size == 3
    assert stats == {
        "scopes": 1,
        "clusters": 1,
        "members": 3,
        "added_or_changed": 1,
        "removed": 0,
    }
    assert AuditEvent.objects.filter(target_type="topiccluster").count() == 1

    # A second rebuild over the same memories changes nothing and records nothing.
    assert topic_clusters_rebuild()["added_or_changed"] == 0
    assert AuditEvent.objects.filter(target_type="topiccluster").count() == 1
    read = topic_clusters_read(scope_ids=[global_scope.pk], min_members=3)
    assert [(c["term"], c["size"]) for c in read] == [("whale", 3)]
    assert topic_clusters_read(scope_ids=[global_scope.pk], min_members=5) == []


def test_it_extracts_chinese_nouns_verbs_and_adjectives_and_english_words():
    words = keywords_extract("我们拒绝了越过边界的请求 because the whale-listen test failed")
    assert {"拒绝", "边界", "请求"} <= words
    assert {"whale", "listen", "test", "failed"} <= words
    assert "the" not in words and "我们" not in words


def test_it_filters_by_document_frequency_at_the_edges():
    documents = [{"a"} if i < 4 else set() for i in range(20)] + [set()]
    assert terms_filter(documents[:20], min_df=3, max_ratio=0.2) == {"a": [0, 1, 2, 3]}
    assert terms_filter([{"a"}] * 5 + [set()] * 15, min_df=3, max_ratio=0.2) == {}


def test_it_merges_overlapping_terms_only_when_asked(global_scope, write_narrative):
    for index, filler in enumerate(FILLER):
        extra = "whale ocean" if index < 3 else ""
        write_narrative(global_scope, f"{filler} {extra}".strip())
    topic_clusters_rebuild(merge=False)
    assert set(TopicCluster.objects.values_list("term", flat=True)) == {"whale", "ocean"}
    topic_clusters_rebuild(merge=True)
    merged = TopicCluster.objects.get()
    assert sorted(merged.terms) == ["ocean", "whale"] and merged.size == 3


def test_it_segments_each_text_once_and_again_only_when_it_changes(global_scope, write_narrative):
    narratives = [write_narrative(global_scope, f"{word} whale") for word in FILLER[:5]]
    topic_clusters_rebuild(dry_run=True)
    assert NarrativeKeywords.objects.count() == 0  # a dry run writes nothing, not even the cache
    topic_clusters_rebuild()
    cached = dict(NarrativeKeywords.objects.values_list("narrative_id", "words"))
    assert cached[narratives[0].pk] == ["apple", "whale"]
    # A redaction rewrites the text in place: its words are recomputed, the others reused.
    Memory.objects.filter(pk=narratives[0].pk).update(search_text="lantern harbor")
    topic_clusters_rebuild()
    cached = dict(NarrativeKeywords.objects.values_list("narrative_id", "words"))
    assert cached[narratives[0].pk] == ["harbor", "lantern"]
    assert cached[narratives[1].pk] == ["bridge", "whale"]
