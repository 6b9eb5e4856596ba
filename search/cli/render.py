"""Text for people in a terminal: words wrapped at word boundaries, matched words marked (bold and coloured on a
terminal, plain when the output is piped), tables without empty columns.

Highlighted text arrives with the private-use markers ``MARK_ON``/``MARK_OFF`` around each match (what the CLI asks
``highlight`` for as its tags); they take no width, and each match stays within one word (matches never span
whitespace), so wrapping never separates a mark from its word.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence

import click

MARK_ON, MARK_OFF = "\ue000", "\ue001"
#: the widest column a table gives a cell before it wraps it
MAX_CELL = 60


def width() -> int:
    """The terminal's width (80 when unknown or piped), at least 40."""
    return max(40, shutil.get_terminal_size((80, 24)).columns)


def visible(text: str) -> int:
    return len(text) - text.count(MARK_ON) - text.count(MARK_OFF)


def marked(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """``text`` with markers around ``spans`` ([start, end) ranges, in order, not overlapping)."""
    out, at = [], 0
    for s, e in sorted(set(spans)):
        if s < at:
            continue
        out += [text[at:s], MARK_ON, text[s:e], MARK_OFF]
        at = e
    out.append(text[at:])
    return "".join(out)


def styled(text: str, color: bool) -> str:
    """Markers → bold yellow (``color``) or nothing."""
    if not color:
        return text.replace(MARK_ON, "").replace(MARK_OFF, "")
    on = click.style("", bold=True, fg="yellow", reset=False)
    return text.replace(MARK_ON, on).replace(MARK_OFF, "\x1b[0m")


def wrap(text: str, limit: int) -> list[str]:
    """``text`` in lines of at most ``limit`` visible characters, broken at whitespace; a word longer than a line is
    cut only then."""
    lines: list[str] = []
    line, used = "", 0
    for word in text.split():
        n = visible(word)
        if used and used + 1 + n > limit:
            lines.append(line)
            line, used = "", 0
        while n > limit:   # one word wider than the line: cut it (marks stay balanced: they wrap the whole word)
            head = word[:limit]
            lines.append(head if not used else line + " " + head)
            word, n, line, used = word[limit:], visible(word[limit:]), "", 0
        line, used = (line + " " + word, used + 1 + n) if used else (word, n)
    if line or not lines:
        lines.append(line)
    return lines


def paragraph(text: str, color: bool, indent: int = 0, first: str = "") -> str:
    """A wrapped, indented block; ``first`` (e.g. a rank) replaces the indent of the first line."""
    room = max(20, width() - indent)
    lines = wrap(text, room)
    pad = " " * indent
    out = [(first.ljust(indent) if i == 0 and first else pad) + styled(line, color) for i, line in enumerate(lines)]
    return "\n".join(out)


def table(rows: Sequence[dict], columns: Sequence[tuple[str, str, int]], color: bool) -> str:
    """``rows`` as a table of ``columns`` (title, key, widest cell): columns whose cells are all empty are left out,
    cells wrap at word boundaries, the table fits the terminal where it can (wide columns give way first, never
    below their longest word or 12 characters)."""
    cols = [(t, k, w) for t, k, w in columns if any(str(r.get(k, "") or "").strip() for r in rows)]
    if not cols:
        return ""
    cells = [[str(r.get(k, "") or "") for _, k, _ in cols] for r in rows]
    widths = []
    for i, (title, _, cap) in enumerate(cols):
        longest = max([visible(c) for row in cells for c in [row[i]]] + [len(title)])
        widths.append(min(longest, cap))
    words = [max([len(t)] + [visible(x) for row in cells for x in row[i].split()]) for i, (t, _, _) in
             enumerate(cols)]
    room = width() - 2 * (len(cols) - 1)
    # give way first down to each column's longest word (no word cut), then, only if still too wide, to 12
    for floor in ([min(w, x) for w, x in zip(widths, words, strict=True)], [min(w, 12) for w in widths]):
        while sum(widths) > room:
            i = max(range(len(widths)), key=lambda j: widths[j] - floor[j])
            if widths[i] <= floor[i]:
                break
            widths[i] -= 1
    header = "  ".join(t.ljust(w) for (t, _, _), w in zip(cols, widths, strict=True)).rstrip()
    out = [click.style(header, bold=True) if color else header,
           "  ".join("─" * w for w in widths)]
    for row in cells:
        wrapped = [wrap(c, w) for c, w in zip(row, widths, strict=True)]
        for j in range(max(len(x) for x in wrapped)):
            parts = []
            for lines, w in zip(wrapped, widths, strict=True):
                text = lines[j] if j < len(lines) else ""
                parts.append(styled(text, color) + " " * (w - visible(text)))
            out.append("  ".join(parts).rstrip())
    return "\n".join(out)
