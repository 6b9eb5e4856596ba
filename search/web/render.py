"""Templates and the few helpers they use: marking spans of text, building links, showing times.

Jinja2 escapes every value (``autoescape`` on for every template); the only ``Markup`` made here is built from
escaped pieces and our own ``<mark>`` tags, so a paper title holding ``<script>`` renders as text.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from search.flyaoc.coverage import detail_text as reason_detail

#: mark classes: query words, gene names (expansions), ontology mentions
MARK_CLASSES = ("q", "g", "t")
#: the tags the pages ask the service's highlighter for (``search.text.highlight``, ``encoder: default``): characters
#: of Unicode's private use area, which :func:`fragment` turns into marks of escaped text (the service's fragments
#: are never put in a page as HTML)
OPEN, CLOSE = "\ue000", "\ue001"


def mark(text: str, spans: Iterable[Sequence[int]] = (), cls: str = "q",
         more: Iterable[tuple[int, int, str]] = (), terms: Iterable[tuple[int, int, str, str]] = ()) -> Markup:
    """``text`` escaped, with ``[start, end)`` ``spans`` wrapped in ``<mark class=cls>`` (and ``more`` with their own
    class), and ``terms`` (start, end, term id, name) as links to their term pages, which win where they overlap a
    mark; overlapping spans are merged, out-of-range ones clipped. A paper page calls this once per passage: the pieces
    are escaped as plain strings (:func:`_escaped`) and a text without marks in one call."""
    links = [(int(s), int(e), "t", tid, name) for s, e, tid, name in terms]
    plain = [(int(s), int(e), cls, "", "") for s, e in spans] + [(int(s), int(e), c, "", "") for s, e, c in more]
    if not links and not plain:
        return escape(text)
    if links:
        taken = [(s, e) for s, e, *_ in links]
        plain = [m for m in plain if not any(ts < m[1] and m[0] < te for ts, te in taken)]
    esc = _escaped if type(text) is str else (lambda t: str(escape(t)))   # Markup text stays as it is
    out: list[str] = []
    pos, size = 0, len(text)
    for s, e, c, tid, name in sorted(links + plain):
        s, e = max(s, pos), min(e, size)
        if s >= e:
            continue
        out.append(esc(text[pos:s]))
        if c == "t":
            out.append(f'<a class="t" href="/terms/{_escaped(quote(tid, safe=":"))}" title="{_escaped(tid)} '
                       f'{_escaped(name)}">{esc(text[s:e])}</a>')
        else:
            out.append(f'<mark class="{c if c in MARK_CLASSES else "q"}">{esc(text[s:e])}</mark>')
        pos = e
    out.append(esc(text[pos:]))
    return Markup("".join(out))


def _escaped(text: str) -> str:
    """``markupsafe.escape(text)`` as a plain string, character for character (``tests/web/test_render.py`` holds
    them equal): the same five replacements without a ``Markup`` per piece, which cost a marked page ~2x its marks."""
    return (text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;").replace("'", "&#39;")
            .replace('"', "&#34;"))


def fragment(tagged: str, cls: str = "q") -> Markup:
    """A highlight fragment tagged with :data:`OPEN`/:data:`CLOSE` as escaped text with the tagged words marked (a
    stray tag in the text itself is dropped)."""
    text, spans = untag(tagged)
    return mark(text, spans, cls)


def whole(fragments: list[str] | None, text: str) -> Markup:
    """``text`` marked by its highlight fragment when the fragment is all of it (a title), else as plain text."""
    if fragments and len(fragments) == 1:
        plain, spans = untag(fragments[0])
        if plain == text:
            return mark(text, spans)
    return mark(text)


def untag(tagged: str) -> tuple[str, list[tuple[int, int]]]:
    """A tagged fragment's plain text and its marked [start, end) ranges."""
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    size, start = 0, None
    for piece in tagged.replace(CLOSE, OPEN + CLOSE).split(OPEN):
        if piece.startswith(CLOSE):
            piece = piece[1:]
            if start is not None:
                spans.append((start, size))
                start = None
        elif start is None and out:
            start = size
        out.append(piece)
        size += len(piece)
    return "".join(out), [(s, e) for s, e in spans if e > s]


def marked(text: str, marks: Any) -> Markup:
    """``text`` with the marks of ``search.retrieval.browse.TextMarks`` (or a paper view's title): the gene's names
    as ``g``, the other matches as ``q``, ontology terms as links."""
    def get(name: str) -> Any:
        return (marks.get(name) if isinstance(marks, Mapping) else getattr(marks, name, None)) or []

    names = [tuple(x) for x in get("names")]
    named = set(names)
    words = [(s, e, "q") for s, e in get("highlights") if (s, e) not in named]
    terms = [(t.start, t.end, t.term_id, t.name) for t in get("terms")]
    return mark(text, more=[*((s, e, "g") for s, e in names), *words], terms=terms)


def link(path: str, params: Mapping[str, Any] | None = None, **more: Any) -> str:
    """``path`` with a query string of the parameters that are set (None, "" and False are left out; lists repeat)."""
    merged = {**(params or {}), **more}
    pairs: list[tuple[str, str]] = []
    for k, v in merged.items():
        if v is None or v == "" or v is False:
            continue
        for x in v if isinstance(v, list | tuple) else [v]:
            pairs.append((k, "1" if x is True else str(x)))
    return path + ("?" + urlencode(pairs) if pairs else "")


def path_part(value: str) -> str:
    """A value as one URL path segment (``/``, ``?``, ``#`` escaped; ``:`` kept readable)."""
    return quote(value, safe=":")


def when(ts: float | None) -> str:
    if not ts:
        return "–"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def number(value: float | int | None, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def supplement_link(pmcid: str, place: Any, q: str = "", gene: str = "") -> str:
    """The supplement page of a place in a file (``search.core.supplements.SupplementPlace``): its file, its part and
    its first row, with the words to mark."""
    return link(f"/papers/{quote(pmcid, safe=':')}/supplements/{place.file_index}", part=place.part,
                start=place.first or None, q=q, gene=gene)


@cache
def environment() -> Environment:
    env = Environment(loader=PackageLoader("search.web", "templates"), autoescape=select_autoescape(default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, auto_reload=False)
    env.globals.update(link=link, path_part=path_part, supplement_link=supplement_link, whole=whole,
                       reason_detail=reason_detail)
    env.filters.update(mark=mark, when=when, number=number, path_part=path_part, fragment=fragment, marked=marked)
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
