"""Names a request may carry (ontology, collection, build id): one pattern each, and one way to check them.

A name is data, never a path. It must match its pattern in full (``fullmatch``: ``$`` would let a trailing newline
through): lower-case ASCII letters, digits, ``-`` and ``_`` only, so no dot, slash, backslash, NUL or newline, and
no traversal can be spelled. Then it must be found in a registry of what exists (a directory listing, the builds a
process holds, the cluster's aliases); files are opened through the registry's entry, not through the request text.
Malformed names are 422 ``invalid_request``; well-formed unknown ones 404 ``not_found`` with the valid names.

- ontology: ``[a-z][a-z0-9_-]{0,31}``: a directory name under ``terms/`` and part of a cluster index name (which
  must be lower case);
- collection: ``[a-z0-9][a-z0-9_-]{0,62}``: a directory under ``collections/`` and a cluster index prefix;
- build id: what the engines make (``20250101T120000-1a2b3c`` embedded, ``20250101-120000-1a2b3c`` cluster).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from search.core.errors import CollectionNotFound, IndexMissing, InvalidRequest, NotFound

ONTOLOGY_PATTERN = r"[a-z][a-z0-9_-]{0,31}"
COLLECTION_PATTERN = r"[a-z0-9][a-z0-9_-]{0,62}"
BUILD_ID_PATTERN = r"[0-9]{8}[T-][0-9]{6}-[0-9a-f]{6}"
#: TREC topic ids and run tags of a run export: one token
TREC_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
#: the collection a service serves when a request names none; without an index it is "not ready", not "unknown"
DEFAULT_COLLECTION = "default"

PATTERNS: dict[str, re.Pattern[str]] = {
    "ontology": re.compile(ONTOLOGY_PATTERN), "collection": re.compile(COLLECTION_PATTERN),
    "build_id": re.compile(BUILD_ID_PATTERN),
}
LABELS = {"ontology": "ontology name", "collection": "collection name", "build_id": "build id"}
#: at most this many characters of a rejected name are quoted back
QUOTE_CHARS = 200


def shown(value: object) -> str:
    """``repr(value)``, cut to :data:`QUOTE_CHARS` characters, for error messages about hostile input."""
    text = repr(value)
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS - 1] + "…"


def check(kind: str, name: object, field: str | None = None) -> str:
    """``name`` if it is a well-formed ``kind`` name (see the module docstring), else 422 ``invalid_request``."""
    pattern = PATTERNS[kind]
    if not isinstance(name, str) or not pattern.fullmatch(name):
        raise InvalidRequest(f"{field or kind}: {shown(name)} is not a valid {LABELS[kind]}: "
                             f"it must match {pattern.pattern}",
                             details={"field": field or kind, "pattern": pattern.pattern})
    return name


def check_ontology(name: object, field: str = "ontology") -> str:
    return check("ontology", name, field)


def check_collection(name: object, field: str = "collection") -> str:
    return check("collection", name, field)


def is_valid(kind: str, name: object) -> bool:
    return isinstance(name, str) and PATTERNS[kind].fullmatch(name) is not None


def lookup(kind: str, name: object, registry: Iterable[str], *, field: str | None = None, hint: str = "") -> str:
    """``name`` checked against its pattern (422) and then found in ``registry`` (404 listing what exists)."""
    name = check(kind, name, field)
    known = sorted(registry)
    if name not in known:
        raise NotFound(f"unknown {LABELS[kind]} {name!r}" + (f": {hint}" if hint else ""),
                       details={"field": field or kind, "valid": known})
    return name


def index_missing(collection: str, message: str, **kw: Any) -> IndexMissing:
    """503 ``index_missing`` for the default collection (not ready yet), 404 ``not_found`` for any other (a named
    collection without a published index does not exist)."""
    return (IndexMissing if collection == DEFAULT_COLLECTION else CollectionNotFound)(message, **kw)
