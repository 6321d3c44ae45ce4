"""Which queries ask about a past choice (and so prefer decision-layer narratives), which ask
when (and so prefer turns that place themselves in time), and which ask how many or where (and so
prefer turns that state a number or name something)."""

import pytest

from memory.search.intent import (
    asks_about_choice,
    asks_for_number,
    asks_for_place,
    asks_when,
    ends_asking,
    names_proper,
    states_number,
)


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
        # How much time lies between two events.
        "How long has it been since Andrew adopted his first pet?",
        "How many months passed between Andrew adopting Toby and Buddy?",
        "How long did it take for Joanna to finish writing her book?",
        "How long did Evan and his partner date before getting married?",
        "After how many weeks did Tim reconnect with the fan?",
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
        # How long something lasted is said in its own words ("it took two hours").
        "How long did the trail hike take?",
        "How many months is the lease?",
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


@pytest.mark.parametrize(
    ("query", "number", "place"),
    [
        ("How many children does Melanie have?", True, False),
        ("how long has Nate had his turtles", True, False),
        ("How often does John go to the gym?", True, False),
        ("¿Cuántos gatos tiene Ana?", True, False),
        ("Where did Caroline move from?", False, True),
        ("Which country did Caroline move from?", False, True),
        ("In what city did they meet?", False, True),
        ("¿Dónde vive Ana?", False, True),
        # Asked when, not how long: the time prior's question.
        ("How long ago did we migrate?", False, False),
        ("What did Melanie paint?", False, False),
        # A dialogue-length query says these in passing; only the opening counts.
        ("Honestly I still feel overwhelmed by how much I have to do.", False, False),
        ("Let's discuss specific situations where I can use these phrases.", False, False),
        # Where the work got to, not a place.
        ("Where are we with our previous script? What should be done next?", False, False),
        ("where do we start with the contract law revision", False, False),
        ("Where did we go for dinner in Lisbon?", False, True),
    ],
)
def test_it_recognises_a_question_about_a_number_or_a_place(query, number, place):
    assert asks_for_number(query) is number
    assert asks_for_place(query) is place


@pytest.mark.parametrize(
    ("text", "number", "proper"),
    [
        ("We have 3 kids now.", True, False),
        ("I go there twice a week.", True, False),
        ("Been married for FIVE years!", True, False),
        ("Tengo dos gatos.", True, False),
        ("We went camping at Yosemite.", False, True),
        ("Thanks, Melanie! That sounds lovely.", False, True),
        # Not a number: a word that holds one; not a name: a sentence's first word, or "I".
        ("Someone gave me a pottery class.", False, False),
        ("Paris was lovely. I loved it.", False, False),
        ("", False, False),
    ],
)
def test_it_reads_which_turns_state_a_number_or_name_something(text, number, proper):
    assert states_number(text) is number
    assert names_proper(text) is proper
