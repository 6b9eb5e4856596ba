"""Hidden terms: ids an agent must not find (FlyAOC's specificity-gap mode, spec §2.7).

A hidden set is named (``flyaoc``: the 120 GO ids of FlyAOC's ``hidden_go_terms.json``, bundled as package data so
it works without ``../shared``) or an explicit id list, optionally with every descendant. Hidden terms never appear
in term search or children lists and a lookup says they are hidden; their ancestors stay visible. Until sessions
exist the set comes with each request (``hidden=flyaoc`` or ``hidden=GO:1,GO:2``, ``hidden_descendants=true``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

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
