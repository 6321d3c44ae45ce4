"""Which queries ask about a past choice (and so prefer decision-layer narratives), and which ask
when (and so prefer turns that place themselves in time)."""

import pytest

from memory.search.intent import asks_about_choice, asks_when, ends_asking


@pytest.mark.parametrize(
    "query",
    [
        "why did we choose Celery over RQ?",
        "What did we decide about the retry policy",
        "what was the reason for picking zstd",
        "为什么用 PostgreSQL 而不是 MySQL",
        "当时为什么决定迁移到 Redis？",
        "选择 jieba 的原因是什么",
        "なぜ Redis を選んだんですか",
        "SQLite にした理由は？",
        "¿Por qué elegimos Django?",
        "¿qué decidimos sobre las copias de seguridad?",
    ],
)
def test_it_recognises_a_question_about_a_past_choice(query):
    assert asks_about_choice(query)


@pytest.mark.parametrize(
    "query",
    [
        "choose a name for the new module",
        "how do I run the tests",
        "the parser crashed again on empty input",
        "帮我把这个函数改成异步的",
        "テストを実行してください",
        "¿cómo despliego el servicio?",
    ],
)
def test_it_leaves_other_queries_alone(query):
    assert not asks_about_choice(query)


@pytest.mark.parametrize(
    "query",
    [
        "When did Caroline go to the support group?",
        "when is Andrew planning to go to the beach",
        "Which year did Audrey adopt her first dogs?",
        "what date was the release",
        "How long ago did we migrate?",
        "他什么时候去的北京？",
        "我们是哪天上线的",
        "いつ東京に行きましたか",
        "¿Cuándo fuiste al cine?",
        "¿En qué año nos mudamos?",
    ],
)
def test_it_recognises_a_question_about_when(query):
    assert asks_when(query)


@pytest.mark.parametrize(
    "query",
    [
        # A dialogue-length query says "when" without asking it.
        "Yeah, when I was debugging the crawler the retries kept piling up.",
        "What did we decide about the retry policy",
        "他喜欢什么？",
        "いつも同じエラーが出ます",
        "¿cómo despliego el servicio?",
    ],
)
def test_it_does_not_read_every_when_as_a_question_about_time(query):
    assert not asks_when(query)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What made you try pottery?", True),
        ("Wow, Melanie! What made you try pottery?  \n", True),
        ("你去过北京吗？", True),
        ("Running farther after work to clear your head, Melanie? I love that.", False),
        ("I took up pottery last month.", False),
        ("", False),
    ],
)
def test_it_reads_which_texts_end_asking(text, expected):
    assert ends_asking(text) is expected
