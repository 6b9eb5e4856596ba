"""Hidden terms resolved in an ontology: ids an agent must not find (FlyAOC's specificity-gap mode, spec §2.7).

Hidden terms never appear in term search or children lists and a lookup says they are hidden; their ancestors stay
visible. How a request or a session names them (a set, ids, descendants) is ``search.schema.hidden``; this module
resolves those names in an ontology (:func:`expand`: alt ids to primary, descendants if asked), the one home of that
rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from search.ontology.model import HIERARCHY, Ontology
from search.schema.hidden import HiddenSpec, parse_hidden

#: relations followed when descendants are hidden: "more specific" (is_a) and "part of" (part_of, substage_of)
DEFAULT_RELATIONS: tuple[str, ...] = HIERARCHY


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


def spec_ids(spec: HiddenSpec, ontology: Ontology | None = None) -> frozenset[str]:
    """Every id ``spec`` hides: the ids as given (so an alt id is refused as written) plus, in ``ontology``, their
    primary ids and, if asked, descendants. Without an ontology, the ids as given."""
    ids = parse_hidden(spec.names())
    if ontology is None:
        return frozenset(ids)
    return expand(ontology, ids, descendants=spec.descendants).ids | frozenset(ids)
