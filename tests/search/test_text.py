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
