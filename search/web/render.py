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

#: mark classes: query words, gene names (expansions), ontology mentions
MARK_CLASSES = ("q", "g", "t")


def mark(text: str, spans: Iterable[Sequence[int]] = (), cls: str = "q",
         more: Iterable[tuple[int, int, str]] = (), terms: Iterable[tuple[int, int, str, str]] = ()) -> Markup:
    """``text`` escaped, with ``[start, end)`` ``spans`` wrapped in ``<mark class=cls>`` (and ``more`` with their own
    class), and ``terms`` (start, end, term id, name) as links to their term pages, which win where they overlap a
    mark; overlapping spans are merged, out-of-range ones clipped."""
    links = [(int(s), int(e), "t", tid, name) for s, e, tid, name in terms]
    taken = [(s, e) for s, e, *_ in links]
    plain = [(int(s), int(e), cls, "", "") for s, e in spans] + [(int(s), int(e), c, "", "") for s, e, c in more]
    marks = sorted(links + [m for m in plain if not any(ts < m[1] and m[0] < te for ts, te in taken)])
    out: list[str] = []
    pos = 0
    for s, e, c, tid, name in marks:
        s, e = max(s, pos), min(e, len(text))
        if s >= e:
            continue
        out.append(str(escape(text[pos:s])))
        if c == "t":
            out.append(f'<a class="t" href="/terms/{escape(quote(tid, safe=":"))}" title="{escape(tid)} '
                       f'{escape(name)}">{escape(text[s:e])}</a>')
        else:
            kind = c if c in MARK_CLASSES else "q"
            out.append(f'<mark class="{kind}">{escape(text[s:e])}</mark>')
        pos = e
    out.append(str(escape(text[pos:])))
    return Markup("".join(out))


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
    env.globals.update(link=link, path_part=path_part, supplement_link=supplement_link)
    env.filters.update(mark=mark, when=when, number=number, path_part=path_part)
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
