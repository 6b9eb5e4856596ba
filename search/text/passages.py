"""Split a paper into passages, the unit of evidence agents search and quote.

A passage is one paragraph, or a piece of about ``max_words`` words of a long one, cut at sentence boundaries (at
word boundaries inside a sentence longer than twice ``max_words``). Ids are ``PMCID:section:paragraph`` with
``.k`` for the k-th piece (k ≥ 1); section 0 is the abstract, body sections count from 1. ``start``/``end`` are
character offsets into the paragraph string, so ``paragraph[start:end] == passage.text`` always. Deterministic:
the same paper always gives the same passages.
"""

from __future__ import annotations

import math
import re

import regex

from search.core.models import ABSTRACT, Paper, Passage

#: Words ending in "." after which a capitalised word does not start a new sentence.
ABBREVIATIONS = frozenset("""e.g. i.e. al. fig. figs. approx. cf. vs. ca. eq. eqs. ref. refs. no. nos. dr. mr. mrs.
    prof. st. sp. spp. ssp. subsp. var. resp. vol. pp. p. tab. suppl. inc. ltd. co. corp. jr. sr. ch. sect.""".split())
_BOUNDARY = regex.compile(r"([.?!][\"'\u201d\u2019)\]]*)(\s+)(?=[\p{Lu}\p{N}(\[])")
_INITIAL = regex.compile(r"\p{Lu}\.")
_WORD = re.compile(r"\S+")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")


def abstract_paragraphs(abstract: str) -> list[str]:
    """The abstract's paragraphs (blank-line separated parts, stripped, empty ones dropped): passage paragraph
    indexes of section 0 refer to this list."""
    return [p.strip() for p in _BLANK_LINE.split(abstract) if p.strip()]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each sentence: a break after ``.?!`` (and closing quotes/brackets) followed by space and
    an upper-case letter, digit or opening bracket, except after known abbreviations and single initials."""
    start = len(text) - len(text.lstrip())
    spans = []
    for m in _BOUNDARY.finditer(text):
        end = m.end(1)
        if m.group(1) == ".":
            i = m.start(1)
            while i > 0 and not text[i - 1].isspace():
                i -= 1
            token = text[i:end].lstrip("([{\"'\u201c\u2018")
            if token.lower() in ABBREVIATIONS or _INITIAL.fullmatch(token):
                continue
        if end > start:
            spans.append((start, end))
        start = m.end()
    end = len(text.rstrip())
    if end > start:
        spans.append((start, end))
    return spans


def _word_chunks(text: str, start: int, end: int, max_words: int) -> list[tuple[int, int, int]]:
    words = [m.span() for m in _WORD.finditer(text, start, end)]
    return [(words[i][0], words[min(i + max_words, len(words)) - 1][1], min(max_words, len(words) - i))
            for i in range(0, len(words), max_words)]


def split_paragraph(text: str, max_words: int = 300) -> list[tuple[int, int]]:
    """``(start, end)`` of the pieces of one paragraph; one piece (the stripped paragraph) when it is short."""
    start, end = len(text) - len(text.lstrip()), len(text.rstrip())
    if start >= end:
        return []
    total = len(text.split())
    if total <= max_words:
        return [(start, end)]
    units: list[tuple[int, int, int]] = []
    for a, b in sentence_spans(text):
        n = len(text[a:b].split())
        units.extend(_word_chunks(text, a, b, max_words) if n > 2 * max_words else [(a, b, n)])
    target = total / math.ceil(total / max_words)
    pieces: list[tuple[int, int]] = []
    piece_start, piece_end, words = units[0][0], units[0][0], 0
    for a, b, n in units:
        # close the piece when the next unit would pass max_words, or overshoot the even share more than it fills
        if words and (words + n > max_words or words + n - target > target - words):
            pieces.append((piece_start, piece_end))
            piece_start, words = a, 0
        piece_end, words = b, words + n
    pieces.append((piece_start, piece_end))
    return pieces


def split_passages(paper: Paper, max_words: int = 300) -> list[Passage]:
    """All passages of a paper in document order: abstract paragraphs (section 0), then each body section's."""
    if max_words < 1:
        raise ValueError(f"max_words must be positive, got {max_words}")
    sections = [(ABSTRACT, abstract_paragraphs(paper.abstract))] + [(s.type, s.paragraphs) for s in paper.sections]
    out = []
    for s_index, (kind, paragraphs) in enumerate(sections):
        for p_index, paragraph in enumerate(paragraphs):
            for k, (start, end) in enumerate(split_paragraph(paragraph, max_words)):
                out.append(Passage(id=f"{paper.pmcid}:{s_index}:{p_index}" + (f".{k}" if k else ""),
                                   pmcid=paper.pmcid, section_index=s_index, paragraph_index=p_index,
                                   section_type=kind, start=start, end=end, text=paragraph[start:end],
                                   year=paper.year))
    return out
