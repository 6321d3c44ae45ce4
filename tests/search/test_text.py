"""How text becomes search terms (memory/search/text.py)."""

import sys
import unicodedata

from memory.search.text import FORMAT_CHARACTERS, text_terms


def test_it_drops_every_format_character_unicode_knows():
    format_characters = [
        chr(code) for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code)) == "Cf"
    ]
    assert format_characters
    assert [char for char in format_characters if not FORMAT_CHARACTERS.fullmatch(char)] == []
    assert FORMAT_CHARACTERS.sub("", "Whis\u200bkers a\u00adb \u202eok") == "Whiskers ab ok"


def test_it_reads_traditional_only_characters_as_simplified_and_leaves_shared_ones():
    assert text_terms("臺灣的電腦") == text_terms("台湾的电脑") == ["台湾", "电脑"]
    assert text_terms("我們明天開會") == text_terms("我们明天开会")
    # 著 and 乾 are written in simplified text too (著名, 乾隆): left as they are.
    assert "著名" in text_terms("著名的作家")
    assert "乾隆" in text_terms("乾隆皇帝")


def test_it_reads_a_japanese_kanji_run_also_as_a_kana_less_query_reads_it():
    text = text_terms("人々は来週の月曜日に新幹線で東京駅へ行く")
    for query in ["新幹線", "月曜日", "来週", "人々", "東京"]:
        assert set(text_terms(query)) <= set(text), query
    # jieba does not know 々 and cuts it off alone; a bare 々 is no term.
    assert "々" not in text


def test_it_meets_a_chinese_name_however_jieba_cuts_it():
    """jieba guesses words it does not know from their neighbours: the same name was one term
    alone (林雨桐), another after 带 (带林雨桐), and a given name (雨桐) never met the full one."""
    stored = set(text_terms("用户的女朋友林雨桐对海鲜过敏"))
    for query in ["这周末带林雨桐去吃饭", "雨桐喜欢吃什么", "我和雨桐去吃饭"]:
        assert "雨桐" in stored & set(text_terms(query)), query
    assert "晓华" in set(text_terms("我和晓华去吃饭")) & set(text_terms("用户的同事张晓华"))
    # A known word keeps jieba's own pieces, and a pair with a stop word is no term.
    assert text_terms("我们讨论了数据库迁移方案") == [
        "讨论",
        "数据",
        "据库",
        "数据库",
        "迁移",
        "方案",
    ]
    assert "我和" not in text_terms("我和晓华去吃饭")


def test_it_makes_each_emoji_a_term_and_leaves_text_symbols_out():
    """Before, emoji were no terms: "🔥" found nothing, and a text of emoji only had no terms."""
    assert "🔥" in text_terms("the deploy is 🔥 today")
    assert text_terms("🔥") == ["🔥"]
    assert text_terms("🎉🎉") == ["🎉", "🎉"]
    assert text_terms("今天很开心😀") == ["今天", "开心", "😀"]
    # A skin tone or variation selector changes nothing; a sequence is its pictographs; a flag is one.
    assert text_terms("👍🏽 ❤️ 👩‍💻 🇯🇵") == ["👍", "❤", "👩", "💻", "🇯🇵"]
    # Marks, arrows, bullets and emphasised punctuation are no terms.
    assert text_terms("© 2024 ® ↔ ▶ ➡ ◼ 🔹 ❗ ❓ ➕ 〰") == ["2024"]


def test_it_keeps_the_chinese_words_of_a_chinese_text_quoting_japanese():
    """Before, one kana anywhere read the whole text as Japanese: a Chinese sentence quoting
    「よろしく」 became character pairs (我们, 们讨, 论了 …) instead of its words."""
    chinese = "我们讨论了数据库迁移方案"
    assert text_terms(f"{chinese}，她说「よろしく」") == [
        *text_terms(chinese),
        "よろ",
        "ろし",
        "しく",
    ]
    # Japanese text, its kanji-only runs included, reads as it always did.
    assert text_terms("東京、大阪、名古屋に行った") == [
        "东京",
        "大阪",
        "名古",
        "古屋",
        "屋に",
        "に行",
        "行っ",
        "名古屋",
        "行",
    ]


def test_it_drops_a_generic_chinese_word_with_the_words_inside_it():
    """Before, jieba's search mode made 有时候 three terms (有时, 时候, 有时候), so a memory of
    small talk matched a dialogue three times over one "sometimes"."""
    assert text_terms("有时候我觉得有点累") == ["觉得", "有点累"]
    assert text_terms("另一方面，也就是说") == []
    # A content word keeps the words inside it: 边界 still meets 边界条件, and 小时候 holds 小时.
    assert text_terms("处理边界条件") == ["处理", "边界", "条件", "边界条件"]
    assert text_terms("我小时候在成都") == ["小时", "小时候", "成都"]
