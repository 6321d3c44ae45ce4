"""How text becomes search terms (memory/search/text.py)."""

import sys
import unicodedata

from memory.search.text import FORMAT_CHARACTERS


def test_it_drops_every_format_character_unicode_knows():
    format_characters = [
        chr(code) for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code)) == "Cf"
    ]
    assert format_characters
    assert [char for char in format_characters if not FORMAT_CHARACTERS.fullmatch(char)] == []
    assert FORMAT_CHARACTERS.sub("", "Whis\u200bkers a\u00adb \u202eok") == "Whiskers ab ok"
