"""Hidden terms as a request or a session names them: a named set (``flyaoc``: the 120 GO ids of FlyAOC's
``hidden_go_terms.json``, bundled as package data so it works without ``../shared``) and/or explicit ids, optionally
with every descendant (FlyAOC's specificity-gap mode, spec §2.7).

A session stores a :class:`HiddenSpec`; a term call hides what its :class:`HiddenQuery` names: the request's
``hidden`` (``flyaoc`` or ``GO:1,GO:2``) and ``hidden_descendants`` merged with the session's spec
(:func:`hidden_query`: a request adds, never un-hides). :func:`parse_hidden` turns either into ids. Resolving them in
an ontology (alt ids, descendants) is ``search.ontology.hidden``; this module is what a client needs to name them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

from search.core.errors import InvalidRequest

#: named set → package data file (``search/data``) holding ``{"source": …, "ids": [...]}``
NAMED_SETS: dict[str, str] = {"flyaoc": "flyaoc_hidden_go_terms.json"}


@cache
def named_set(name: str) -> tuple[str, ...]:
    """The ids of a named hidden set."""
    if name not in NAMED_SETS:
        raise InvalidRequest(f"unknown hidden set {name!r}", details={"valid": sorted(NAMED_SETS)})
    data = json.loads(resources.files("search").joinpath("data", NAMED_SETS[name]).read_text())
    return tuple(data["ids"])


def parse_hidden(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """Ids named by a request's ``hidden`` value: comma-separated set names and/or ids, in order, deduplicated."""
    if spec is None:
        return ()
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [s.strip() for s in spec]
    out: list[str] = []
    for item in filter(None, items):
        if ":" in item:
            out.append(item)
        elif item in NAMED_SETS:
            out.extend(named_set(item))
        else:
            raise InvalidRequest(f"hidden: {item!r} is neither a named set nor a term id",
                                 details={"valid": sorted(NAMED_SETS) + ["<term id>, …"]})
    return tuple(dict.fromkeys(out))


class HiddenSpec(BaseModel):
    """Hidden terms of a session: a named set (``flyaoc``) and/or explicit ids, optionally with descendants."""

    model_config = ConfigDict(extra="forbid")

    set: Literal["flyaoc"] | None = None
    ids: list[str] = Field(default_factory=list)
    descendants: bool = False

    @field_validator("ids")
    @classmethod
    def _ids(cls, v: list[str]) -> list[str]:
        bad = [i for i in v if ":" not in i]
        if bad:
            raise ValueError(f"term ids look like GO:0005634, got {bad[:5]}")
        return list(dict.fromkeys(v))

    def names(self) -> list[str]:
        """The set name and the ids, as a ``hidden`` parameter lists them."""
        return ([self.set] if self.set else []) + list(self.ids)


class HiddenQuery(NamedTuple):
    """What one term call hides: a ``hidden`` parameter value (set names and/or ids, comma-separated) and whether
    descendants are hidden too."""

    hidden: str | None = None
    descendants: bool = False

    def params(self) -> dict[str, Any]:
        """The term endpoints' query parameters for this (none when nothing is hidden)."""
        return {"hidden": self.hidden, "hidden_descendants": self.descendants} if self.hidden else {}


def hidden_query(hidden: str | None = None, descendants: bool = False,
                 spec: HiddenSpec | None = None) -> HiddenQuery:
    """A request's hidden terms merged with its session's ``spec``: the union of both, descendants when either
    asks. A request can add hidden terms, never un-hide the session's."""
    parts = [hidden] if hidden else []
    if spec is not None:
        parts += spec.names()
        descendants = descendants or spec.descendants
    return HiddenQuery(",".join(parts) or None, descendants)


def spec_from_text(text: str | None, descendants: bool = False) -> dict[str, Any] | None:
    """A session's ``hidden_terms`` body from a command line's ``--hidden`` text (``flyaoc,GO:1``): the set name
    and the ids, unchecked (the service checks them). ``ValueError`` when it names more than one set."""
    if not text:
        return None
    items = [h.strip() for h in text.split(",") if h.strip()]
    named = [h for h in items if ":" not in h]
    if len(named) > 1:
        raise ValueError("at most one named set")
    return {"set": named[0] if named else None, "ids": [h for h in items if ":" in h], "descendants": descendants}
