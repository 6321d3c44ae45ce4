"""Which queries ask about a past choice (and so prefer decision-layer narratives)."""

import pytest

from memory.search.intent import asks_about_choice


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
