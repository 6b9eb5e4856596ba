"""Bounds on request text: one home for what a JSON body may hold and for how request text is echoed or stored.

Every JSON body is checked here once, at the boundary (``search.api.guard``), before a route, the trace or the store
sees it: at most ``max_body_bytes`` bytes (a setting), nesting at most :data:`MAX_JSON_DEPTH` levels, strings (and
keys) at most :data:`MAX_STRING_CHARS` characters with no NUL and no lone surrogate (``"\\ud800"`` is valid JSON but
no valid text: it cannot be encoded as UTF-8, so storing, tracing or answering it fails), integers that fit a signed
64-bit integer (SQLite's INTEGER, tantivy's I64, Elasticsearch's long) and finite numbers only (no ``NaN``,
``Infinity`` or ``1e999``). Field-level bounds (a query, a gene, a name) are tighter and live in the request models.

What a request sent is echoed back in errors at most :data:`QUOTE_CHARS` characters long (:func:`quoted`); what is
stored from it (trace arguments) or read back from a store written by older versions passes :func:`bounded`, so a
stored value can always be served.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from search.core.errors import InvalidJson, InvalidRequest

MAX_JSON_DEPTH = 32
MAX_STRING_CHARS = 1_000_000
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
#: characters of a piece of request text quoted back in an error message or detail
QUOTE_CHARS = 200
#: characters of one string kept in a stored echo of a request (trace arguments)
STORED_STRING_CHARS = 10_000
#: text that is not valid Unicode text: NUL and lone (unpaired) surrogates
BAD_TEXT = re.compile(r"[\x00\ud800-\udfff]")
CUT = "…"


def _json_integer(value: Any) -> Any:
    """What JSON calls an integer: a number without a fraction (``10`` or ``10.0``), never ``true`` (pydantic would
    read it as 1: ``limit: true`` answered one hit) nor a string of digits."""
    if isinstance(value, bool | str | bytes):
        raise ValueError("Input should be a valid integer (a JSON number, not a boolean or a string)")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: an integer field of a request body, as JSON Schema's ``integer`` means it
JsonInt = Annotated[int, BeforeValidator(_json_integer)]


def json_int(ge: int | None = None, le: int | None = None) -> Any:
    """:data:`JsonInt` with bounds (for an optional field: the bounds must come before the validator, or the JSON
    schema says ``ge``/``le`` instead of ``minimum``/``maximum``)."""
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(_json_integer)]


def quoted(value: Any, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, for a message about hostile input."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + CUT


def clip(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` cut to ``limit`` characters (with a mark when cut)."""
    return text if len(text) <= limit else text[:limit - 1] + CUT


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be accepted as text (NUL, a lone surrogate), or None."""
    m = BAD_TEXT.search(text)
    if m is None:
        return None
    what = "a NUL character" if m.group() == "\x00" else f"a lone surrogate (\\u{ord(m.group()):04x})"
    return f"contains {what} at position {m.start()}; send valid Unicode text"


def _parse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_path(parts: tuple[Any, ...], root: str = "body") -> str:
    """``("filters", "year_from")`` → ``body.filters.year_from``; list indexes as ``[i]``."""
    out = root
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{BAD_TEXT.sub(chr(0xFFFD), clip(str(p), 80))}"
    return out


def parse_json_body(raw: bytes) -> Any:
    """The JSON value of a request body, or :class:`InvalidJson` (400) / ``InvalidRequest`` (422) saying where and
    why. See the module docstring for the bounds."""
    try:
        value = json.loads(raw, parse_constant=_parse_constant)   # integers parsed in C: no per-value Python call
    except json.JSONDecodeError as e:
        raise InvalidJson(f"The body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}.",
                          details={"field": "body", "line": e.lineno, "column": e.colno, "position": e.pos}) from None
    except UnicodeDecodeError as e:
        raise InvalidJson(f"The body is not UTF-8 text (byte {e.start}): send JSON encoded as UTF-8.",
                          details={"field": "body", "position": e.start}) from None
    except RecursionError:
        raise InvalidRequest(f"body: JSON nested deeper than {MAX_JSON_DEPTH} levels.",
                             details={"field": "body", "max_depth": MAX_JSON_DEPTH}) from None
    except ValueError as e:  # NaN / Infinity, or an integer of thousands of digits (Python's int parsing limit)
        if "digits" in str(e):
            raise InvalidRequest(f"body: integer out of range (a signed 64-bit integer is at most {INT64_MAX}).",
                                 details={"field": "body", "max": INT64_MAX}) from None
        raise InvalidJson(f"The body is not valid JSON: {e}.", details={"field": "body"}) from None
    check_json_value(value)
    return value


def check_json_value(value: Any) -> None:
    """Raise ``InvalidRequest`` (422) naming the first place where ``value`` breaks a bound. A first pass only asks
    whether anything does (no paths kept: a fifth of the cost); the pass that names the place runs only then."""
    if not _within_bounds(value):
        _check_with_paths(value)


def _text_ok(text: str) -> bool:
    # isascii() is a flag lookup: only non-ASCII text can hold a surrogate
    return len(text) <= MAX_STRING_CHARS and "\x00" not in text and (text.isascii() or not BAD_TEXT.search(text))


def _within_bounds(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            if depth >= MAX_JSON_DEPTH:
                return False
            items: Any = v.values()
            if not all(_text_ok(k) for k in v):
                return False
        elif isinstance(v, list):
            if depth >= MAX_JSON_DEPTH:
                return False
            items = v
        else:
            items = (v,)
            depth -= 1
        for x in items:
            t = type(x)
            if t is str:
                if not _text_ok(x):
                    return False
            elif t is int:
                if not INT64_MIN <= x <= INT64_MAX:
                    return False
            elif t is float:
                if not math.isfinite(x):
                    return False
            elif t is dict or t is list:
                stack.append((x, depth + 1))
    return True


def _check_with_paths(value: Any) -> None:
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        v, parts = stack.pop()
        if len(parts) >= MAX_JSON_DEPTH and isinstance(v, dict | list):
            _refuse(parts, f"nested deeper than {MAX_JSON_DEPTH} levels", max_depth=MAX_JSON_DEPTH)
        if isinstance(v, dict):
            for k, x in v.items():
                _check_text(parts + (k,), k, "key")
                stack.append((x, parts + (k,)))
        elif isinstance(v, list):
            stack.extend((x, parts + (i,)) for i, x in enumerate(v))
        elif isinstance(v, int) and not isinstance(v, bool) and not INT64_MIN <= v <= INT64_MAX:
            _refuse(parts, f"integer out of range (a signed 64-bit integer is at most {INT64_MAX})", max=INT64_MAX)
        elif isinstance(v, float) and not math.isfinite(v):
            _refuse(parts, "number out of range (it does not fit a 64-bit float)")
        elif isinstance(v, str):
            _check_text(parts, v, "string")


def _check_text(parts: tuple[Any, ...], text: str, what: str) -> None:
    if len(text) > MAX_STRING_CHARS:
        _refuse(parts, f"{what} of {len(text):,} characters (at most {MAX_STRING_CHARS:,})", max_chars=MAX_STRING_CHARS)
    problem = text_problem(text)
    if problem:
        _refuse(parts, f"{what} {problem}")


def _refuse(parts: tuple[Any, ...], why: str, **details: Any) -> None:
    field = json_path(parts)
    raise InvalidRequest(f"{field}: {why}.", details={"field": field, **details})


def bounded(value: Any, depth: int = MAX_JSON_DEPTH, max_chars: int = STORED_STRING_CHARS) -> Any:
    """A copy of a JSON-like value that can always be stored and served: values nested deeper than ``depth`` become
    a marker string, strings longer than ``max_chars`` are cut, NUL and lone surrogates become U+FFFD, integers
    outside int64 and non-finite numbers become strings."""
    if isinstance(value, str):
        return BAD_TEXT.sub("\ufffd", clip(value, max_chars))
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if INT64_MIN <= value <= INT64_MAX else clip(str(value), 40)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict | list) and depth <= 0:
        return f"(cut: nested deeper than {MAX_JSON_DEPTH} levels)"
    if isinstance(value, dict):
        return {bounded(str(k), 0, QUOTE_CHARS): bounded(v, depth - 1, max_chars) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [bounded(v, depth - 1, max_chars) for v in value]
    return bounded(str(value), depth, max_chars)


def bounded_stored(raw: str | bytes, max_chars: int = STORED_STRING_CHARS) -> Any:
    """A stored JSON document made :func:`bounded` (None when even Python's parser cannot read it)."""
    try:
        return bounded(json.loads(raw), max_chars=max_chars)
    except (ValueError, RecursionError):
        return None
