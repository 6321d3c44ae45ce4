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
