from memory.services.bounds import text_bounded


def test_it_keeps_a_short_text_whole():
    assert text_bounded("边界条件", limit=10) == "边界条件"


def test_it_keeps_the_head_and_the_tail_of_a_long_text():
    text = "question first " + "日志" * 50_000 + " and the real ask at the end"
    bounded = text_bounded(text, limit=2000)
    assert len(bounded) == 2000
    assert bounded.startswith("question first ") and bounded.endswith("the real ask at the end")
