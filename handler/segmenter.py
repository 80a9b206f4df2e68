"""Splitting request text into sentence segments of bounded length.

Each segment becomes one engine item, so long requests are synthesised as
several short items that batch well with other requests' items instead of one
very long item that forces padding on everything it shares a call with.
"""

from __future__ import annotations

import re

#: A sentence ends after . ! ? (or a run of them, with closing quotes/brackets)
#: followed by whitespace, or at a line break.
_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*\s+|\n+")
#: Preferred places to cut an over-long sentence, best first.
_SOFT_BREAKS = (re.compile(r"[,;:—–]\s+"), re.compile(r"\s+"))


def split_sentences(text: str, *, max_chars: int) -> list[str]:
    """Split ``text`` into sentences, each at most ``max_chars`` characters.

    Sentences longer than ``max_chars`` are cut at the last comma/semicolon/colon
    or dash before the limit, else at the last space, else hard at the limit.

    Args:
        text: any string.
        max_chars: the longest segment, in characters (>= 1).

    Returns:
        Non-empty, stripped segments in reading order; ``[]`` for blank text.

    Raises:
        ValueError: ``max_chars < 1``.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    segments: list[str] = []
    start = 0
    for end in [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]:
        segments.extend(_cut(text[start:end].strip(), max_chars))
        start = end
    return [s for s in segments if s]


def _cut(sentence: str, max_chars: int) -> list[str]:
    """Cut one sentence into pieces of at most ``max_chars`` characters."""
    pieces: list[str] = []
    rest = sentence
    while len(rest) > max_chars:
        cut = _best_cut(rest, max_chars)
        pieces.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    pieces.append(rest)
    return pieces


def _best_cut(text: str, max_chars: int) -> int:
    """Index just after the best break point within ``text[:max_chars]`` (> 0)."""
    window = text[: max_chars + 1]
    for pattern in _SOFT_BREAKS:
        ends = [m.end() for m in pattern.finditer(window) if 0 < m.start() and m.end() <= max_chars + 1]
        if ends:
            return min(ends[-1], max_chars)
    return max_chars
