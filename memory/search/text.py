"""Turning text into search terms, the same way for documents and queries, in any of our languages.

- Everywhere: format characters (zero-width spaces, soft hyphens, bidi marks) dropped first.
- Latin and other space-separated scripts: NFKC, lower-case, Unicode word split, accents removed
  from Latin words ("reunión" meets "reunion"), English and Spanish stop words dropped, English Snowball stemming ("adopted" and "adopting" meet at "adopt"), irregular forms
  brought to their base word first ("bought" meets "buy", "children" "child"). Measured on LoCoMo,
  stop words + stemming are worth ~10 points of recall@5 over a plain split.
- Chinese: jieba in search mode, which emits the sub-words of long words too, so a 2-character query
  such as 边界 matches a document jieba segmented as 边界条件 (FTS5 trigram cannot match 2 characters).
  Stop words are dropped with the words inside them (有时候 is no term, nor its 有时 and 时候).
- Japanese and Korean (and any CJK run in a text that contains kana): overlapping character bigrams,
  which need no dictionary and match any word of two or more characters. In Japanese, each run of
  kanji is also read as Chinese is (its words of one or three and more characters; the two-character
  ones are bigrams already), so a query typed in kanji alone ("新幹線", "誕生日"), which has no kana
  and is read as Chinese, meets the text that wrote it among kana. A text that also writes Han
  characters Japanese does not (们, 这, 说) is Chinese quoting Japanese: only its runs holding kana
  are read as Japanese, the rest keep their Chinese words.
- Emoji: each pictograph is a term (🔥, 👍🏽 as 👍, 👩‍💻 as 👩 and 💻); symbols plain text writes as
  punctuation (©, ▶, ➡, ❗) are not.
- Chinese characters used only in traditional writing are read as their simplified form (會議 as
  会议, 臺灣 as 台湾, OpenCC's character table), so a text and a query written in the two scripts
  meet, and jieba, whose dictionary is simplified, segments traditional text into words. A character
  that simplified writing also uses (著, 乾, 麽) is left as it is, so simplified text reads exactly as
  before.
- Dates, in any of these: explicit dates ("10.01.2024", "2024/01/10"), month abbreviations, Chinese
  and Japanese months ("2024年1月") and Spanish ones ("7 de enero") also read as the English month
  words a turn's date terms are written in.
"""

import re
import threading
import unicodedata
from datetime import datetime
from functools import cache
from importlib import resources

from django.conf import settings

ENGLISH_STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "can't",
        "cannot",
        "could",
        "couldn't",
        "did",
        "didn't",
        "do",
        "does",
        "doesn't",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "hadn't",
        "has",
        "hasn't",
        "have",
        "haven't",
        "having",
        "he",
        "he'd",
        "he'll",
        "he's",
        "her",
        "here",
        "here's",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "how's",
        "i",
        "i'd",
        "i'll",
        "i'm",
        "i've",
        "if",
        "in",
        "into",
        "is",
        "isn't",
        "it",
        "it's",
        "its",
        "itself",
        "let's",
        "me",
        "more",
        "most",
        "mustn't",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "shan't",
        "she",
        "she'd",
        "she'll",
        "she's",
        "should",
        "shouldn't",
        "so",
        "some",
        "such",
        "than",
        "that",
        "that's",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "there's",
        "these",
        "they",
        "they'd",
        "they'll",
        "they're",
        "they've",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "wasn't",
        "we",
        "we'd",
        "we'll",
        "we're",
        "we've",
        "were",
        "weren't",
        "what",
        "what's",
        "when",
        "when's",
        "where",
        "where's",
        "which",
        "while",
        "who",
        "who's",
        "whom",
        "why",
        "why's",
        "with",
        "won't",
        "would",
        "wouldn't",
        "you",
        "you'd",
        "you'll",
        "you're",
        "you've",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "re",
        "ve",
        "just",
        "also",
        "said",
        "will",
    ]
)
# Function words and the generic adverbs, pronouns and connectives a long dialogue repeats (很, 最,
# 非常, 没有, 但是 …): the common core of the HIT / Baidu / jieba stop lists. Content words stay.
CHINESE_STOPWORDS = frozenset(
    [
        "的",
        "了",
        "是",
        "在",
        "和",
        "也",
        "就",
        "都",
        "而",
        "及",
        "与",
        "着",
        "或",
        "吗",
        "呢",
        "吧",
        "啊",
        "呀",
        "把",
        "被",
        "这",
        "那",
        "之",
        "其",
        "一个",
        "很",
        "最",
        "非常",
        "不",
        "没",
        "没有",
        "但是",
        "但",
        "可是",
        "不过",
        "所以",
        "因为",
        "因此",
        "如果",
        "虽然",
        "而且",
        "并且",
        "然后",
        "还是",
        "还",
        "又",
        "再",
        "才",
        "只",
        "只是",
        "就是",
        "已经",
        "曾经",
        "正在",
        "一直",
        "一些",
        "一下",
        "一点",
        "有点",
        "有些",
        "这个",
        "那个",
        "这些",
        "那些",
        "这样",
        "那样",
        "这么",
        "那么",
        "怎么",
        "怎样",
        "什么",
        "为什么",
        "哪",
        "哪里",
        "哪个",
        "谁",
        "多少",
        "我",
        "你",
        "您",
        "他",
        "她",
        "它",
        "我们",
        "你们",
        "他们",
        "她们",
        "它们",
        "自己",
        "大家",
        "咱们",
        "有",
        "没",
        "会",
        "能",
        "可以",
        "要",
        "想",
        "得",
        "地",
        "对",
        "给",
        "跟",
        "让",
        "从",
        "向",
        "到",
        "为",
        "以",
        "于",
        "比",
        "等",
        "等等",
        "吧",
        "嘛",
        "哦",
        "哈",
        "嗯",
        "呃",
        "啦",
        "喔",
        "真的",
        "真",
        "挺",
        "太",
        "更",
        "比较",
        "特别",
        "其实",
        "确实",
        "当然",
        "可能",
        "应该",
        "一样",
        "一起",
        "还有",
        "以及",
        "或者",
        "而是",
        "然而",
        "于是",
        "另外",
        "此外",
        "总之",
        "并",
        "即",
        "则",
        "所",
        "个",
        "些",
        "种",
        "次",
        "上",
        "下",
        "里",
        "中",
        "过",
        "来",
        "去",
        "说",
        "看",
        "做",
        "让",
        "被",
        "把",
        # Generic words of the HIT and Baidu lists that jieba's search mode also finds inside
        # longer words (有时候: 有时, 时候), and those longer words.
        "时候",
        "有时",
        "有时候",
        "这时",
        "那时",
        "一般",
        "就是说",
        "也就是说",
        "一方面",
        "另一方面",
        "怎么样",
        "什么样",
        "总的来说",
        "总而言之",
        "之所以",
        "换句话说",
        "是不是",
    ]
)
# Japanese is indexed as character bigrams: the bigrams of particles, copulas and auxiliaries that
# every sentence has carry no topic.
JAPANESE_STOP_BIGRAMS = frozenset(
    [
        "です",
        "でし",
        "した",
        "して",
        "ます",
        "まし",
        "ませ",
        "せん",
        "ない",
        "いる",
        "いま",
        "ある",
        "あり",
        "から",
        "まで",
        "ので",
        "のは",
        "のが",
        "のを",
        "には",
        "では",
        "とは",
        "でも",
        "にも",
        "よう",
        "こと",
        "もの",
        "これ",
        "それ",
        "あれ",
        "この",
        "その",
        "あの",
        "ここ",
        "そこ",
        "ため",
        "なる",
        "なり",
        "なっ",
        "たい",
        "たら",
        "ても",
        "った",
        "って",
        "てい",
        "いた",
        "・・",
        "ちょ",
        "っと",
        "とて",
        "ても",
        "けど",
        "だけ",
        "など",
        "なの",
        "なに",
    ]
)
# Spanish function words, leaving out those that are also English content words (son, era, sin, dos).
SPANISH_STOPWORDS = frozenset(
    [
        "de",
        "la",
        "que",
        "el",
        "en",
        "y",
        "los",
        "se",
        "del",
        "las",
        "un",
        "por",
        "con",
        "una",
        "su",
        "para",
        "es",
        "al",
        "lo",
        "como",
        "más",
        "pero",
        "sus",
        "le",
        "ha",
        "me",
        "si",
        "sobre",
        "este",
        "ya",
        "entre",
        "cuando",
        "todo",
        "esta",
        "ser",
        "fue",
        "había",
        "muy",
        "hasta",
        "desde",
        "está",
        "mi",
        "porque",
        "qué",
        "sólo",
        "solo",
        "han",
        "yo",
        "hay",
        "vez",
        "puede",
        "todos",
        "así",
        "nos",
        "ni",
        "tiene",
        "él",
        "uno",
        "donde",
        "bien",
        "ese",
        "ahora",
        "cada",
        "e",
        "otro",
        "después",
        "te",
        "otros",
        "aunque",
        "esa",
        "eso",
        "hace",
        "otra",
        "tan",
        "durante",
        "siempre",
        "tanto",
        "ella",
        "sí",
        "sido",
        "según",
        "menos",
        "mismo",
        "estos",
        "estas",
        "algo",
        "nada",
        "muchos",
        "mucho",
        "quien",
        "quién",
        "cómo",
        "dónde",
        "cuándo",
        "estoy",
        "estás",
        "están",
        "estaba",
        "tengo",
        "tienes",
        "tenemos",
        "soy",
        "eres",
        "somos",
        "fui",
        "ir",
        "voy",
        "va",
        "vamos",
        "les",
        "nosotros",
        "ellos",
        "ellas",
        "usted",
        "ustedes",
        "mí",
        "ti",
        "tu",
        "tú",
        "mis",
        "tus",
        "unos",
        "unas",
        "este",
        "esto",
        "aquí",
        "allí",
        "también",
        "pues",
        "o",
        "u",
    ]
)
MONTH_ABBREVIATIONS = {
    "jan": "january",
    "feb": "february",
    "mar": "march",
    "apr": "april",
    "jun": "june",
    "jul": "july",
    "aug": "august",
    "sep": "september",
    "sept": "september",
    "oct": "october",
    "nov": "november",
    "dec": "december",
}

# English words Snowball cannot bring to their stem: irregular past forms and plurals, each line the
# base word and its forms. A question asks in the base form ("When did Melanie buy the
# figurines?") and the turn that answers tells it in the past ("These figurines I bought
# yesterday"). Left out: forms whose other sense is common in conversation (rose, ground, wound,
# bit, bound, lives, leaves); the light verbs (go, get, make, take, come, give, know, think, see,
# find, feel, keep, tell, leave, mean, show, hold), which a long query holds many of and which
# say little of what a memory is about (with them, RealMem's session R@5 fell 0.006 on its tune
# half; tools/recall/README.md); auxiliaries (did, had, was, been), stop words already.
_ENGLISH_IRREGULAR = """
arise arose arisen
awake awoke awoken
bear bore borne
beat beaten
become became
begin began begun
bend bent
bite bitten
bleed bled
blow blew blown
break broke broken
breed bred
bring brought
build built
burn burnt
buy bought
catch caught
choose chose chosen
cling clung
creep crept
deal dealt
dig dug
draw drew drawn
dream dreamt
drink drank drunk
drive drove driven
eat ate eaten
fall fell fallen
feed fed
fight fought
flee fled
fly flew flown
forbid forbade forbidden
forget forgot forgotten
forgive forgave forgiven
freeze froze frozen
grow grew grown
hang hung
hear heard
hide hid hidden
kneel knelt
lay laid
lead led
leap leapt
learn learnt
lend lent
light lit
lose lost
meet met
mistake mistook mistaken
overcome overcame
pay paid
prove proven
ride rode ridden
ring rang rung
rise risen
run ran
seek sought
sell sold
send sent
sew sewn
shake shook shaken
shine shone
shoot shot
shrink shrank shrunk
sing sang sung
sink sank sunk
sit sat
sleep slept
slide slid
speak spoke spoken
speed sped
spend spent
spin spun
spit spat
spring sprang sprung
stand stood
steal stole stolen
stick stuck
sting stung
stink stank stunk
strike struck stricken
strive strove striven
swear swore sworn
sweep swept
swim swam swum
swing swung
teach taught
tear tore torn
throw threw thrown
understand understood
undertake undertook undertaken
wake woke woken
wear wore worn
weave wove woven
weep wept
win won
withdraw withdrew withdrawn
write wrote written
child children
man men
woman women
foot feet
tooth teeth
mouse mice
goose geese
wife wives
knife knives
wolf wolves
half halves
shelf shelves
thief thieves
loaf loaves
"""
ENGLISH_IRREGULAR_FORMS = {
    form: base
    for base, *forms in (line.split() for line in _ENGLISH_IRREGULAR.strip().splitlines())
    for form in forms
}

_CJK_RUN = re.compile(
    r"[\u3005\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff66-\uff9f]+"
)
_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
# Kanji (with 々, the mark that repeats one: 人々, 時々) inside a Japanese run.
_KANJI_RUN = re.compile(r"[\u3005\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_HANGUL = re.compile(r"[\uac00-\ud7af]")
# Emoji, each a term of its own: Unicode's Extended_Pictographic characters (emoji-data.txt, which
# reserves whole blocks for emoji not yet assigned) and flags (a pair of regional indicators).
# Left out, as punctuation is: what plain text writes as a mark, an arrow, a bullet or an operator
# (©, ®, 🄯, ↔, ↩, ➡, ⬅, 🔼, ▪, ▶, ◼, ⬛, 🔹, ❓, ❗, ➕, 〰, 〽), and what NFKC has already spelled as
# letters (™, ℹ, ‼, and the squared and circled ideographs: 🈚 is 無, ㊙ 秘). A sequence is read as
# its pictographs: the zero-width joiner is a format character, and skin tones and variation
# selectors are no pictographs, so 👍🏽 and ❤️ meet 👍 and ❤, and 👩‍💻 (woman technologist) meets 👩
# and 💻, the parts a device that cannot draw the sequence shows.
_EMOJI = (
    "[\u231a-\u231b\u2328\u2388\u23cf\u23e9-\u23f3\u23f8-\u23fa\u2600-\u2605\u2607-\u2612"
    "\u2614-\u2685\u2690-\u2705\u2708-\u2712\u2714\u2716\u271d\u2721\u2728\u2733-\u2734"
    "\u2744\u2747\u274c\u274e\u2763-\u2767\u27b0\u27bf\u2b50\u2b55\U0001f000-\U0001f0ff"
    "\U0001f10d-\U0001f10f\U0001f16d-\U0001f171\U0001f17e-\U0001f17f\U0001f18e"
    "\U0001f191-\U0001f19a\U0001f1ad-\U0001f1e5\U0001f203-\U0001f20f\U0001f23c-\U0001f23f"
    "\U0001f249-\U0001f24f\U0001f252-\U0001f3fa\U0001f400-\U0001f535\U0001f546-\U0001f64f"
    "\U0001f680-\U0001f6ff\U0001f774-\U0001f77f\U0001f7d5-\U0001f7ff\U0001f80c-\U0001f80f"
    "\U0001f848-\U0001f84f\U0001f85a-\U0001f85f\U0001f888-\U0001f88f\U0001f8ae-\U0001f8ff"
    "\U0001f90c-\U0001f93a\U0001f93c-\U0001f945\U0001f947-\U0001faff\U0001fc00-\U0001fffd]"
    "|[\U0001f1e6-\U0001f1ff]{2}"
)
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_WORD_OR_EMOJI = re.compile(rf"{_WORD.pattern}|{_EMOJI}")
# Unicode's format characters (category Cf: zero-width spaces and joiners, soft hyphen, bidi marks,
# BOM, tag characters). Invisible in text and not word characters, so "Whis\u200bkers" split into
# two words that matched nothing; a query and a document typed or pasted with them now read as
# without. Every Cf of Unicode 14 (tests/search/test_text.py checks against unicodedata).
FORMAT_CHARACTERS = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
# Identifiers, paths and hyphenated names ("whale-listen", "foo.bar", "a/b"): matched literally.
_LITERAL = re.compile(r"[^\W_]+(?:[-_./:@#+][^\W_]+)+")
# A quoted phrase: a matching pair of quotes on one line, the phrase hugging them ("like this", not
# the `": … "` between two quoted speaker names of a transcript). A straight quote opens only after
# a non-word character and closes only before one.
_QUOTED = re.compile(
    r'(?<![^\W_])"([^\W_][^"\n]{1,78}[^\s"])"(?![^\W_])'
    r"|“([^\W_][^“”\n]{1,78}[^\s“”])”"
    r"|「([^「」\n]{2,80})」"
    r"|『([^『』\n]{2,80})』"
)
# Explicit dates: 10.01.2024, 10/01/2024 (day and month both read when ambiguous), 2024-01-10,
# 2024/01/10 and 2024.01.10.
NUMERIC_DATE = re.compile(r"\b(\d{1,2})[./](\d{1,2})[./](\d{4})\b")
ISO_DATE = re.compile(r"\b(\d{4})([-/.])(\d{1,2})\2(\d{1,2})\b")
# Chinese and Japanese months: 2024年1月10日, 1月, 十二月 (a numeral right before 月; "三个月" and
# "3ヶ月", three months long, put a counter between them and are not read).
_CJK_NUMERALS = {
    **{numeral: number for number, numeral in enumerate("一二三四五六七八九十", start=1)},
    "十一": 11,
    "十二": 12,
}
CJK_MONTH_NUMBER = r"(1[0-2]|0?[1-9]|十[一二]?|[一二三四五六七八九])"
_CJK_MONTH = re.compile(rf"(?:(\d{{4}})\s*年\s*)?{CJK_MONTH_NUMBER}\s*月")


def cjk_number(number: str) -> int:
    """A month's number as CJK text writes it: 10, 十, 十二."""
    return int(number) if number.isdigit() else _CJK_NUMERALS[number]


# Spanish months by name ("setiembre" too), read where Spanish words place them ("16 de mayo de
# 2024", "en marzo"), not a bare "mayo", which English uses for mayonnaise.
SPANISH_MONTHS = {
    name: number
    for number, name in enumerate(
        [
            "enero",
            "febrero",
            "marzo",
            "abril",
            "mayo",
            "junio",
            "julio",
            "agosto",
            "septiembre",
            "octubre",
            "noviembre",
            "diciembre",
        ],
        start=1,
    )
}
SPANISH_MONTHS["setiembre"] = 9
_SPANISH_MONTH = re.compile(
    rf"\b(?:de|en|desde|hasta) ({'|'.join(SPANISH_MONTHS)})\b(?: del? (\d{{4}})\b)?"
)
# CJK runs longer than this are sentences, not names: they are searched by their words only.
CJK_LITERAL_MAX = 12
MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]

_jieba_lock = threading.Lock()


@cache
def _stemmer():
    import snowballstemmer

    return snowballstemmer.stemmer("english")


@cache
def _stem(word: str) -> str:
    return _stemmer().stemWord(word)


@cache
def _jieba():
    """jieba, initialised once with Tideline's own cache dir (never the system temp dir)."""
    import logging

    import jieba

    with _jieba_lock:
        jieba.setLogLevel(logging.WARNING)
        cache_dir = settings.JIEBA_CACHE_DIR
        cache_dir.mkdir(parents=True, exist_ok=True)
        jieba.dt.tmp_dir = str(cache_dir)
        jieba.initialize()
    return jieba


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


@cache
def _han_folding() -> dict[int, str]:
    """Each character only traditional writing uses → its simplified form (OpenCC's character
    tables: TSCharacters, minus what STCharacters shows simplified writing uses as well, and minus
    a character that may stay itself, like 乾 in 乾隆)."""
    dictionary = resources.files("opencc") / "dictionary"

    def table(name: str) -> dict[str, list[str]]:
        lines = (dictionary / name).read_text(encoding="utf-8").splitlines()
        return {key: forms.split(" ") for key, forms in (line.split("\t") for line in lines)}

    simplified_uses = table("STCharacters.txt")
    return {
        ord(traditional): forms[0]
        for traditional, forms in table("TSCharacters.txt").items()
        if len(traditional) == 1 and traditional not in simplified_uses and traditional not in forms
    }


def han_folded(text: str) -> str:
    """`text` with its traditional-only Chinese characters in their simplified form."""
    return text if text.isascii() else text.translate(_han_folding())


def text_compared(text: str) -> str:
    """`text` as a literal is compared with a row's raw text: NFKC, casefolded, Han-folded."""
    return han_folded(unicodedata.normalize("NFKC", text).casefold())


def _chinese_words(run: str) -> list[str]:
    """jieba's search mode: each word, preceded by the known words inside it when it is longer
    than two characters (边界条件: 边界, 条件), so a query of the shorter word meets it. Neither a
    stop word nor anything inside one is a term: the words inside a generic word are generic too,
    and counted it again (有时候 was 有时, 时候 and 有时候, three matches for one "sometimes")."""
    words = []
    for word in _jieba().cut(run):
        # jieba does not know 々 and cuts it off as a word of its own, which says nothing.
        if word in CHINESE_STOPWORDS or not word.strip("々 "):
            continue
        words += [inner for inner in _inner_words(word) if inner not in CHINESE_STOPWORDS]
        words.append(word)
    return words + [piece for word in words for piece in _unknown_word_pieces(word)]


def _inner_words(word: str) -> list[str]:
    """The known words of two characters, then of three, inside `word` (as jieba's search mode
    finds them)."""
    known = _jieba().dt.FREQ
    pairs = [word[i : i + 2] for i in range(len(word) - 1)] if len(word) > 2 else []
    triples = [word[i : i + 3] for i in range(len(word) - 2)] if len(word) > 3 else []
    return [inner for inner in pairs + triples if known.get(inner)]


def _unknown_word_pieces(word: str) -> list[str]:
    """The character pairs of a word jieba does not know, when it is longer than a pair. jieba
    guesses such words (names, mostly) from their neighbours, so one name is cut differently in
    different sentences (林雨桐 alone, 带林雨桐 after 带; 刘思 + 远去) and a given name (雨桐) never
    meets the full name: their pairs do. A pair holding a stop word (我和, 华去) says nothing."""
    if len(word) < 3 or _jieba().dt.FREQ.get(word):
        return []
    return [
        pair
        for pair in _bigrams(word)
        if pair[0] not in CHINESE_STOPWORDS and pair[1] not in CHINESE_STOPWORDS
    ]


def _writes_chinese_only_characters(text: str) -> bool:
    """Whether `text` writes a Han character Japanese does not: one outside JIS X 0213, the
    character set of Japanese writing (every jōyō, jinmeiyō and place-name kanji). Chinese writes
    such characters on nearly every line (们, 这, 说, 时, 对, 还, 欢, 语), so a Chinese text that
    quotes a Japanese word (「ありがとう」, アニメ) is still read as Chinese, all but the runs that
    hold kana; a Japanese text, whose kanji are all in the set, is read as before."""
    for kanji in _KANJI_RUN.findall(text):
        try:
            kanji.encode("euc_jis_2004")
        except UnicodeEncodeError:
            return True
    return False


def _cjk(run: str, japanese: bool) -> list[str]:
    if _HANGUL.search(run):
        return _bigrams(run)
    if japanese:
        return [pair for pair in _bigrams(run) if pair not in JAPANESE_STOP_BIGRAMS] + [
            word
            for kanji in _KANJI_RUN.findall(run)
            for word in _chinese_words(kanji)
            if len(word) != 2
        ]
    return _chinese_words(run)


@cache
def _folded(word: str) -> str:
    """A Latin word without its accents ("reunión" → "reunion", "muñoz" → "munoz"), so text typed
    without them meets text written with them (Spanish users often type neither). A word whose
    letters are not all Latin once unaccented keeps its marks: Devanagari's vowel signs and
    Arabic's vowels are combining marks too, and part of the word."""
    if word.isascii():
        return word
    bare = "".join(
        char for char in unicodedata.normalize("NFD", word) if not unicodedata.combining(char)
    )
    return bare if bare.isascii() else word


_STOPWORDS = frozenset(_folded(word) for word in ENGLISH_STOPWORDS | SPANISH_STOPWORDS)


def _latin(chunk: str, out: list[str]) -> None:
    # An emoji passes through as it is (no stop word, accent or stem). ASCII, most text, holds none,
    # and the word pattern alone reads it twice as fast.
    words = _WORD.findall(chunk) if chunk.isascii() else _WORD_OR_EMOJI.findall(chunk)
    for word in words:
        word = _folded(word)
        if word.endswith("'s"):
            word = word[:-2]
        word = ENGLISH_IRREGULAR_FORMS.get(word, word)
        if word in _STOPWORDS:
            continue
        word = MONTH_ABBREVIATIONS.get(word, word).replace("'", "")
        if word:
            out.append(_stem(word) if word.isascii() else word)


def _month_words(month: int, year: str) -> str:
    return f" {MONTHS[month - 1]} {year} " if 1 <= month <= 12 else f" {year} "


def _dates_spelled(text: str) -> str:
    """Explicit dates, CJK months and Spanish months also as the English month-name words that
    questions and a turn's date terms use."""

    def numeric(match: re.Match) -> str:
        first, second, year = int(match.group(1)), int(match.group(2)), match.group(3)
        words = {_month_words(second, year)} if second <= 12 else set()
        if first <= 12 and first != second:
            words.add(_month_words(first, year))
        return match.group(0) + "".join(sorted(words))

    def iso(match: re.Match) -> str:
        return match.group(0) + _month_words(int(match.group(3)), match.group(1))

    # Each pattern runs only where its anchor occurs: most texts hold no date at all, and this runs
    # on every document and query.
    if any(ch.isdigit() for ch in text):
        text = ISO_DATE.sub(iso, NUMERIC_DATE.sub(numeric, text))
    # Appended, not inserted: words between CJK characters would change how jieba segments them.
    months = []
    if "月" in text:
        months += [
            _month_words(cjk_number(number), year) for year, number in _CJK_MONTH.findall(text)
        ]
    if any(name in text for name in SPANISH_MONTHS):
        months += [
            _month_words(SPANISH_MONTHS[name], year) for name, year in _SPANISH_MONTH.findall(text)
        ]
    return text + "".join(months)


# Indexing is bounded: a 100k-character Chinese turn took seconds to segment on the write path. The
# row is stored whole, its first INDEXED_TEXT_MAX_CHARS are word-indexed (what ranking can use),
# and the trigram index still finds any substring of the whole text.
INDEXED_TEXT_MAX_CHARS = 20_000


def text_terms(text: str) -> list[str]:
    """The search terms of `text` (its first INDEXED_TEXT_MAX_CHARS), repeats kept (they are
    term frequencies)."""
    if not text:
        return []
    text = FORMAT_CHARACTERS.sub("", text[:INDEXED_TEXT_MAX_CHARS])
    text = _dates_spelled(unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'"))
    japanese = bool(_KANA.search(text)) and not _writes_chinese_only_characters(text)
    out: list[str] = []
    position = 0
    for match in _CJK_RUN.finditer(text):
        _latin(text[position : match.start()], out)
        run = match.group()
        out.extend(_cjk(han_folded(run), japanese or bool(_KANA.search(run))))
        position = match.end()
    _latin(text[position:], out)
    return out


def text_tokens(text: str) -> str:
    """The terms as one space-separated string: what the FTS5 word index stores."""
    return " ".join(text_terms(text))


def query_literals(query: str) -> list[str]:
    """Parts of a query to match literally as substrings: identifiers, quoted phrases (a matching
    pair of quotes on one line), and CJK runs of 3 to CJK_LITERAL_MAX characters."""
    query = unicodedata.normalize("NFKC", FORMAT_CHARACTERS.sub("", query))
    found = [next(group for group in m.groups() if group).strip() for m in _QUOTED.finditer(query)]
    found += _LITERAL.findall(query)
    found += [run for run in _CJK_RUN.findall(query) if 3 <= len(run) <= CJK_LITERAL_MAX]
    return list(dict.fromkeys(item for item in found if len(item) >= 3))


def date_terms(moment: datetime | None) -> list[str]:
    """A time as the words a question uses for it: month name and year ("may 2023")."""
    if moment is None:
        return []
    return text_terms(f"{MONTHS[moment.month - 1]} {moment.year}")
