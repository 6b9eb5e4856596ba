"""Passages: the unit of evidence. Paragraphs, with long ones cut at sentence boundaries into ~300-word pieces.

Ids are ``PMCID:section_index:paragraph_index`` (section 0 is the abstract, body sections count from 1) with
``.k`` for the k-th piece (k ≥ 1) of a split paragraph; ``start``/``end`` are character offsets into the paragraph,
so ``paragraph[start:end] == passage.text`` always holds. Both the indexer and the service's build API use this.
"""

from __future__ import annotations

import regex

from search.models import ABSTRACT, Paper, Passage

MAX_WORDS = 300
_ABBREV = r"(?<!\b(?:e\.g|i\.e|et al|Fig|Figs|approx|ca|cf|vs|resp|Eq|Ref|No|[A-Z]))"
_SENTENCE_END = regex.compile(_ABBREV + r"[.?!][\"')\]]*\s+(?=[\p{Lu}\p{N}(\[])")
_WORD = regex.compile(r"\S+")


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        spans.append((start, m.end()))
        start = m.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans


def _word_pieces(text: str, start: int, end: int, max_words: int) -> list[tuple[int, int]]:
    """Cut an over-long sentence at word boundaries."""
    words = [m for m in _WORD.finditer(text, start, end)]
    return [(words[i].start(), words[min(i + max_words, len(words)) - 1].end()) for i in range(0, len(words), max_words)]


def split_paragraph(text: str, max_words: int = MAX_WORDS) -> list[tuple[int, int]]:
    """``(start, end)`` pieces of a paragraph: whole sentences packed up to about ``max_words`` words each."""
    if len(_WORD.findall(text)) <= max_words:
        return [(0, len(text))] if text.strip() else []
    pieces: list[tuple[int, int]] = []
    cur_start, cur_words = None, 0
    for s, e in _sentence_spans(text):
        n = len(_WORD.findall(text, s, e))
        if n > 2 * max_words:
            if cur_start is not None:
                pieces.append((cur_start, s))
                cur_start, cur_words = None, 0
            pieces += _word_pieces(text, s, e, max_words)
            continue
        if cur_start is not None and cur_words + n > max_words:
            pieces.append((cur_start, s))
            cur_start, cur_words = None, 0
        if cur_start is None:
            cur_start = s
        cur_words += n
    if cur_start is not None:
        pieces.append((cur_start, len(text)))
    # trim whitespace at piece edges so offsets point at text
    out = []
    for s, e in pieces:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            out.append((s, e))
    return out


def split_passages(paper: Paper, max_words: int = MAX_WORDS) -> list[Passage]:
    units = [(0, ABSTRACT, [paper.abstract])] if paper.abstract.strip() else []
    units += [(i, s.type, s.paragraphs) for i, s in enumerate(paper.sections, start=1)]
    out = []
    for si, stype, paragraphs in units:
        for pi, para in enumerate(paragraphs):
            for k, (s, e) in enumerate(split_paragraph(para, max_words)):
                pid = f"{paper.pmcid}:{si}:{pi}" + (f".{k}" if k else "")
                out.append(Passage(id=pid, pmcid=paper.pmcid, section_index=si, paragraph_index=pi, section_type=stype,
                                   start=s, end=e, text=para[s:e], year=paper.year))
    return out
