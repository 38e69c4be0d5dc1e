"""The offline default token counter: a deterministic estimate shaped like a BPE vocabulary.

Two tokens per CJK character, about four letters per token for words, three
digits per token for numbers, one per punctuation mark. On the demo data it
over-counts cl100k_base and never under-counts (``bench/token_error.py``), so
budgets enforced with it hold for real models.

A CJK character (U+3000 to U+9FFF: CJK marks, kana, ideographs) is two: cl100k
takes one to three tokens for each, 1.38 on average over the demo's Chinese
alert texts, and a text of one token each, as counted before, was under-counted
(193 of the 195 Chinese alert texts of the demo, by up to 39%). So is any
character from U+A000 on: Hangul (cl100k takes 1.4 tokens a Korean syllable;
counted one each, a Korean alert text was under-counted by 28-36%, found by an
audit), full-width letters and digits as Chinese input methods write them
(``ｋＰａ``), compatibility ideographs, and one beyond U+FFFF (rare ideographs,
emoji). Rare ideographs and Yi syllables take three tokens in cl100k:
a text of many is still under-counted (``VDOCTOR_TOKEN_COUNTER=tiktoken`` counts exactly).
"""

from __future__ import annotations

import re
from functools import lru_cache

# One match per token: up to four ASCII letters of a word (a run of n letters
# gives ceil(n / 4) matches), up to three digits of a number, one CJK or
# full-width character (the ideographic space included), any other
# non-space character. The same counts as reading each word, number and mark
# as a piece and dividing, without a Python loop over the pieces.
_TOKEN_RE = re.compile(
    r"[A-Za-z]{1,4}"
    r"|[0-9]{1,3}"
    r"|[\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]"
    r"|[^\sA-Za-z0-9]"
)
# (Four characters per token for English words and three per digit run: the
# averages of common BPE vocabularies, cl100k-like.)
# Texts counted again (the system prompt, tool schemas, a session's earlier
# rounds, recalled cases) come from here; long texts are too rare to repeat.
_CACHED = 4096
_CACHE_MAX_CHARS = 8192


# Each a second token: a CJK mark, kana or ideograph, and any character from U+A000 (Hangul, Yi, full-width
# forms, compatibility ideographs, and beyond U+FFFF): all that UTF-8 writes with a first byte of E3 to E9, EA
# to EF, or F0 to F4. (U+E000 to U+EFFF, private use, and a lone surrogate count two as well: rare, and over.)
_CJK_RE = re.compile(r"[\u3000-\u9fff\ua000-\U0010ffff]")
# Which first bytes of UTF-8 start a character of ``_CJK_RE``.
_CJK_LEADS = frozenset([*range(0xE3, 0xF0), *range(0xF0, 0xF5)])


def _estimate_by_pattern(text: str) -> int:
    """The estimate by its definition: the matches of ``_TOKEN_RE``, and a second token per CJK character."""
    return len(_TOKEN_RE.findall(text)) + len(_CJK_RE.findall(text))


# The same count without a match per token (over a thousand instructions each: the counts of a diagnosis
# run's prompts were a tenth of its instructions), by whole-text byte operations in C, six to eight times
# fewer. The text's UTF-8 bytes are mapped to one class letter each: an ASCII letter to "a", a digit to "d",
# whitespace to " ", any other ASCII character and the first byte of any other character to "x" (each one
# token: outside ASCII, only whitespace is no token, and a text that may hold such whitespace is counted by
# the pattern), the further bytes of a character to "c" (never inside a run of letters or digits: a
# character's first byte comes before them). A run of n letters is ceil(n / 4) tokens: each "aaaa" becomes
# one "A", and what is left of the run, one to three letters, one token. Digits alike, by three.
def _byte_classes() -> bytes:
    table = bytearray(256)
    for byte in range(256):
        char = chr(byte)
        if byte in _CJK_LEADS:
            table[byte] = ord("h")  # the first byte of a CJK character: two tokens
        elif byte >= 0x80:
            table[byte] = ord("c") if byte < 0xC0 else ord("x")  # 10xxxxxx: a further byte of a character
        elif re.fullmatch("[A-Za-z]", char):
            table[byte] = ord("a")
        elif re.fullmatch("[0-9]", char):
            table[byte] = ord("d")
        else:
            table[byte] = ord("x") if _TOKEN_RE.fullmatch(char) else ord(" ")
    return bytes(table)


_BYTE_CLASSES = _byte_classes()
# Whitespace outside ASCII is no token, but the ideographic space is one (see ``_TOKEN_RE``). A text holding
# the first two UTF-8 bytes of such whitespace (U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029,
# U+202F, U+205F; a few punctuation marks share them) is looked at as text. Written out, not found at import
# (a scan of every character); a test finds them from every character.
_WIDE_SPACE_RE = re.compile(r"[^\S\x00-\x7f\u3000]")
_WIDE_SPACE_LEADS = (b"\xc2\x85", b"\xc2\xa0", b"\xe1\x9a", b"\xe2\x80", b"\xe2\x81")


def _estimate(text: str) -> int:
    # surrogatepass: a lone surrogate (one token, as any other character) becomes three bytes.
    encoded = text.encode("utf-8", "surrogatepass")
    if not text.isascii() and any(lead in encoded for lead in _WIDE_SPACE_LEADS) and _WIDE_SPACE_RE.search(text):
        return _estimate_by_pattern(text)
    classes = encoded.translate(_BYTE_CLASSES)
    words = classes.replace(b"aaaa", b"A")
    numbers = classes.replace(b"ddd", b"D")
    # What is left of a run is "a", "aa" or "aaa", one token: k letters less k // 2 pairs less k // 3 triples
    # (non-overlapping counts) is 1 for k = 1, 2, 3. Of a number, "d" or "dd": k less k // 2.
    rest_of_words = words.count(b"a") - words.count(b"aa") - words.count(b"aaa")
    rest_of_numbers = numbers.count(b"d") - numbers.count(b"dd")
    cjk = classes.count(b"h")
    return classes.count(b"x") + 2 * cjk + words.count(b"A") + rest_of_words + numbers.count(b"D") + rest_of_numbers


_cached_estimate = lru_cache(maxsize=_CACHED)(_estimate)


class EstimatingCounter:
    """The offline default: a close, deterministic estimate of BPE token counts.

    Additive: the count of texts joined by whitespace is the sum of their
    counts (no piece spans whitespace), so a budget can be kept part by part.
    Bounded by length: a character is at most two tokens (a CJK one), so a
    text of fewer than half a budget's characters fits it without being counted.
    """

    name = "estimate"
    additive = True
    most_tokens_per_char = 2

    def count(self, text: str) -> int:
        return _cached_estimate(text) if len(text) <= _CACHE_MAX_CHARS else _estimate(text)
