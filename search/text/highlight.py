"""Highlight fragments like Elasticsearch's: the words a query matched, marked with tags, in fragments of a chosen
size, for a paper's title, abstract and best passage and for a passage's text.

Both engines call :func:`paper_highlight` / :func:`passage_highlight` on the same stored texts, and where the query
matches comes from ``search.text.snippets.Highlighter`` (the two views: ``Dl`` never lights up ``dl``), so the
fragments are the same in both engines by construction. A fragment:

* holds the most matches a window of ``fragment_size`` characters can hold (ties: the earlier one); fragments do not
  overlap; the best ``number_of_fragments`` come back in text order (``number_of_fragments: 0``: the whole field);
* starts and ends at word boundaries (never ``morphogene|sis``): it starts at the start of a word and ends at the
  end of one, so it can be a little shorter than ``fragment_size``, or longer by the one word that holds a match;
* marks each match with ``pre_tag``/``post_tag`` (default ``<em>``/``</em>``); ``encoder: html`` escapes the text
  around the tags (for a page), ``default`` leaves it as it is (tags are then text like any other).

A field without a match has no entry (Elasticsearch's default).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from search.core.models import Passage
from search.core.query import Clause, HighlightSpec
from search.text.analysis import stem
from search.text.snippets import Highlighter


def _merged(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _windows(spans: list[tuple[int, int]], size: int) -> list[list[tuple[int, int]]]:
    """Spans grouped greedily into windows of at most ``size`` characters, left to right."""
    groups: list[list[tuple[int, int]]] = []
    for s, e in spans:
        if groups and e - groups[-1][0][0] <= size:
            groups[-1].append((s, e))
        else:
            groups.append([(s, e)])
    return groups


def _bounds(text: str, group: list[tuple[int, int]], size: int) -> tuple[int, int]:
    """A fragment of about ``size`` characters around ``group``, at word boundaries."""
    first, last = group[0][0], group[-1][1]
    slack = max(0, size - (last - first))
    start = max(0, first - slack // 2)
    end = min(len(text), max(last, start + size))
    if end == len(text):
        start = max(0, min(start, end - size))
    # start: the start of a word (forward to the next one when inside a word, never past the first match)
    if start > 0 and not text[start - 1].isspace():
        nxt = start
        while nxt < first and not text[nxt].isspace():
            nxt += 1
        while nxt < first and text[nxt].isspace():
            nxt += 1
        start = nxt if nxt <= first else start
    while start < first and text[start].isspace():
        start += 1
    # end: the end of a word (back to the previous one when inside a word, never before the last match)
    if end < len(text) and not text[end].isspace():
        back = end
        while back > last and not text[back - 1].isspace():
            back -= 1
        if back > last:
            end = back
        else:
            while end < len(text) and not text[end].isspace():
                end += 1
    while end > last and text[end - 1].isspace():
        end -= 1
    return start, end


def _render(text: str, start: int, end: int, spans: list[tuple[int, int]], spec: HighlightSpec) -> str:
    esc = html.escape if spec.encoder == "html" else (lambda t: t)
    out, at = [], start
    for s, e in spans:
        if s < start or e > end:
            continue
        out += [esc(text[at:s]), spec.pre_tag, esc(text[s:e]), spec.post_tag]
        at = e
    out.append(esc(text[at:end]))
    return "".join(out)


def fragments(hl: Highlighter, text: str, spec: HighlightSpec) -> list[str]:
    """The highlighted fragments of ``text`` (none without a match)."""
    spans = _merged(hl.spans(text))
    if not spans:
        return []
    if spec.number_of_fragments == 0:
        return [_render(text, 0, len(text), spans, spec)]
    groups = _windows(spans, spec.fragment_size)
    best = sorted(range(len(groups)), key=lambda i: (-len(groups[i]), i))[:spec.number_of_fragments]
    return [_render(text, *_bounds(text, groups[i], spec.fragment_size), spans, spec) for i in sorted(best)]


class Highlighters:
    """One highlighter per field of a search: clauses that name a field light up that field only."""

    def __init__(self, clauses: Sequence[Clause]):
        self._clauses = list(clauses)
        self._by_field: dict[str | None, Highlighter] = {}
        self._by_choice: dict[tuple[int, ...], Highlighter] = {}

    def for_field(self, field: str | None) -> Highlighter:
        """The field's highlighter: the same object for fields the same clauses light up (a query that names no
        field: one highlighter, built once, for the title, the abstract and the body)."""
        if field not in self._by_field:
            chosen = tuple(i for i, c in enumerate(self._clauses) if c.field in (None, field))
            if chosen not in self._by_choice:
                self._by_choice[chosen] = Highlighter([self._clauses[i] for i in chosen], stem)
            self._by_field[field] = self._by_choice[chosen]
        return self._by_field[field]


def paper_highlight(hls: Highlighters, spec: HighlightSpec, title: str, abstract: str,
                    best: Passage | None) -> tuple[dict[str, list[str]], str | None]:
    """A paper hit's ``highlight`` (``title``, ``abstract``, ``passage``: its best passage) and that passage's id."""
    out: dict[str, list[str]] = {}
    for name, field, text in (("title", "title", title), ("abstract", "abstract", abstract),
                              ("passage", None, best.text if best else "")):
        if text and (frags := fragments(hls.for_field(field), text, spec)):
            out[name] = frags
    return out, (best.id if best and "passage" in out else None)


def passage_highlight(hls: Highlighters, spec: HighlightSpec, passage_text: str, section_type: str) -> dict[str,
                                                                                                         list[str]]:
    """A passage hit's ``highlight`` (``text``); ``abstract:`` clauses light up abstract passages."""
    field = "abstract" if section_type == "ABSTRACT" else None
    frags = fragments(hls.for_field(field), passage_text, spec)
    return {"text": frags} if frags else {}
