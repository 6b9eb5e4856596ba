"""Hidden terms: ids an agent must not find (FlyAOC's specificity-gap mode, spec §2.7).

A hidden set is named (``flyaoc``: the 120 GO ids of FlyAOC's ``hidden_go_terms.json``, bundled as package data so
it works without ``../shared``) or an explicit id list, optionally with every descendant. Hidden terms never appear
in term search or children lists and a lookup says they are hidden; their ancestors stay visible.

This module is the one home of the rule. A session stores a :class:`HiddenSpec`; a term call hides what its
:class:`HiddenQuery` names: the request's ``hidden`` (``flyaoc`` or ``GO:1,GO:2``) and ``hidden_descendants`` merged
with the session's spec (:func:`hidden_query`: a request adds, never un-hides). :func:`parse_hidden` turns either into
ids and :func:`expand` resolves them in an ontology (alt ids to primary, descendants if asked).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

from search.core.errors import InvalidRequest
from search.ontology.model import HIERARCHY, Ontology

#: named set → package data file (``search/data``) holding ``{"source": …, "ids": [...]}``
NAMED_SETS: dict[str, str] = {"flyaoc": "flyaoc_hidden_go_terms.json"}
#: relations followed when descendants are hidden: "more specific" (is_a) and "part of" (part_of, substage_of)
DEFAULT_RELATIONS: tuple[str, ...] = HIERARCHY


@lru_cache(maxsize=None)
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

    def hidden_ids(self, ontology: Ontology | None = None) -> frozenset[str]:
        """Every id this spec hides: the ids as given (so an alt id is refused as written) plus, in ``ontology``,
        their primary ids and, if asked, descendants. Without an ontology, the ids as given."""
        ids = parse_hidden(self.names())
        if ontology is None:
            return frozenset(ids)
        return expand(ontology, ids, descendants=self.descendants).ids | frozenset(ids)


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


@dataclass(frozen=True)
class HiddenSet:
    """The hidden primary ids of one ontology, with what they were expanded from."""

    ids: frozenset[str] = frozenset()
    given: tuple[str, ...] = ()
    descendants: bool = False
    relations: tuple[str, ...] = DEFAULT_RELATIONS

    def __contains__(self, term_id: object) -> bool:
        return term_id in self.ids

    def __len__(self) -> int:
        return len(self.ids)


def expand(ontology: Ontology, ids: Iterable[str], *, descendants: bool = False,
           relations: str | Iterable[str] = DEFAULT_RELATIONS) -> HiddenSet:
    """Resolve ``ids`` (alt ids → primary) in ``ontology`` and add descendants if asked. Ids the ontology does not
    know (another ontology's, or ones newer than the release) are kept as given: they hide nothing here."""
    relations = tuple(ontology.expand_relations(relations))
    given = tuple(dict.fromkeys(ids))
    out = {ontology.resolve(i) or i for i in given}
    if descendants:
        for i in list(out):
            out.update(ontology.descendants(i, relations))
    return HiddenSet(ids=frozenset(out), given=given, descendants=descendants, relations=relations)
