"""A multilingual text corpus for tokenizer and embedding parity, made offline and reproducibly.

Three parts, each seeded, so a build and a test see the same strings on every host:
- Faker sentences, names and addresses in every locale Faker ships (about 110: every major script);
- random strings drawn from every assigned Unicode code point (letters, marks, numbers, symbols,
  punctuation, separators, format and control characters), alone and mixed with ASCII words;
- the cases users send that sampling rarely hits: empty and whitespace-only texts, combining marks
  and precomposed forms, full-width forms, ligatures, zero-width characters, controls, emoji ZWJ
  sequences, flags and skin tones, RTL marks, noncharacters, and texts past the 256-token limit.
"""

from __future__ import annotations

import random
import sys
import unicodedata
import warnings
from functools import lru_cache

EDGE_CASES = [
    "", " ", "\t\n\r ", "\u3000", "a", "A", "ß", "ẞ", "İstanbul", "ıi",
    "café", "cafe\u0301", "Ǆemal", "ﬁnance ﬂow ﬀ", "Ⅻ ① ㈱ ㎏", "ｆｕｌｌ－ｗｉｄｔｈ　ＡＢＣ１２３", "ﾊﾝｶｸ ｶﾀｶﾅ",
    "zero\u200bwidth\u200cjoin\u200dmark\ufeffbom", "soft\u00adhyphen", "ctrl\x00\x01\x07\x1b\x7f\x85end",
    "tab\there\nnew\rline\x0b\x0c", "👩‍👩‍👧‍👦 family", "👍🏽 👋🏿", "🇯🇵🇫🇷🏳️‍🌈", "❤️ vs ❤", "1️⃣ #️⃣",
    "\u202eevil rtl\u202c \u200fmark\u200e", "עברית ועוד English", "مرحبا بالعالم 123", "﷽",
    "\ufffe\uffff\U0010ffff\U000e0001", "\ue000 private", "Ａ\u0300\u0301\u0302\u0303\u0304\u0305", "Z̷̢̛̲̹͇͓̙̗̾̐͂̿a̵͈̎l̴̢̝̑g̶̜̈́o̷̩͠",
    "한국어 텍스트", "한자모", "日本語のテキストです。", "カタカナ ひらがな 漢字", "中文简体和繁體中文",
    "ภาษาไทยไม่มีช่องว่าง", "हिन्दी देवनागरी", "ગુજરાતી", "தமிழ்", "ქართული", "Հայերեն", "አማርኛ",
    "ελληνικά Ελληνικά ΆΈΉ", "Ёлка и ёжик й", "ў Ўзбек", "Tiếng Việt có dấu", "ǅ ǈ ǋ", "ℌ𝔢𝔩𝔩𝔬 𝕨𝕠𝕣𝕝𝕕 𝐛𝐨𝐥𝐝",
    "math ∑∫∂√∞≠≤", "€$¥£₹₿", "«quotes» „German“ 「Japanese」", "...!!!???", "a-b_c.d/e\\f", "<html>&amp;</html>",
    "x" * 3000, "word " * 400, "日本" * 400, "🚀" * 300, "é" * 2000, "\u0301" * 500,
]


@lru_cache(maxsize=1)
def _assigned_code_points() -> tuple[int, ...]:
    # Surrogates cannot be UTF-8; unassigned code points (Cn) are kept in a small share via EDGE_CASES.
    return tuple(cp for cp in range(sys.maxunicode + 1)
                 if unicodedata.category(chr(cp)) not in ("Cs", "Cn"))


def _faker_texts(per_locale: int, seed: int) -> list[str]:
    from faker import Faker
    from faker.config import AVAILABLE_LOCALES

    texts = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # deprecated locale aliases (fr_QC) still generate their texts
        fakes = [Faker(locale) for locale in AVAILABLE_LOCALES]
    for fake in fakes:
        fake.seed_instance(seed)
        for i in range(per_locale):
            kind = i % 4
            texts.append(fake.sentence(nb_words=6 + i % 12) if kind < 2 else
                         fake.name() if kind == 2 else fake.address())
    return texts


def _unicode_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    points = _assigned_code_points()
    words = ["the", "search", "query", "2026", "price", "help"]
    texts = []
    for i in range(count):
        chars = "".join(chr(rng.choice(points)) for _ in range(rng.randint(1, 40)))
        if i % 3 == 0:   # mixed with ASCII words, as real text mixes scripts
            chars = f"{rng.choice(words)} {chars} {rng.choice(words)}"
        texts.append(chars)
    return texts


def multilingual_corpus(per_locale: int = 24, random_strings: int = 2000, seed: int = 0) -> list[str]:
    """Edge cases + Faker texts in every locale + random strings over all of Unicode
    (size in perf/reports/exact_embedding.md)."""
    return EDGE_CASES + _faker_texts(per_locale, seed) + _unicode_texts(random_strings, seed)


def script_of(text: str) -> str:
    """A coarse label for reports: the Unicode name prefix of the text's first letter ('CJK', 'LATIN')."""
    for ch in text:
        if ch.isalpha():
            return unicodedata.name(ch, "UNNAMED").split(" ")[0]
    return "NO-LETTER"
