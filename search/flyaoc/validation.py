"""Validation of a FlyAOC prediction object (spec §3.3) and flysift's advice on it.

Errors are exactly the format rules FlyAOC's ``submit_annotations`` enforces, written ``"<path>: <message>"``; an
object with no error is ``valid``, so a prediction FlyAOC accepts is accepted here and vice versa (checked against
FlyAOC's JSON Schema on 20,000 random mutations of its example; one deliberate difference: an id must match as a
whole string, where Python's ``$`` would also let a trailing newline through; the id shapes are
``search.flyaoc.ids``). Hidden ids are the one addition: a session that hides terms refuses them (the agent should
use ``description``), because the specificity-gap benchmark is meaningless if the hidden id can be submitted anyway.

Warnings never change ``valid``: ids the ontologies do not know, obsolete ids (with their replacements), aspects and
qualifiers that do not fit the term, a gene other than the session's, items past the rank FlyAOC scores (GO@30,
anatomy@10, synonyms@20), duplicates, and evidence from papers the session never read. The ontology lookup, the
hidden set and the read papers are optional, so the validator works with no ontology loaded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Container, Iterable, Mapping
from typing import Any

from search.core.models import Term
from search.flyaoc.ids import FBBT_ID, FBDV_ID, GENE_ID, GO_ID, PMCID
from search.flyaoc.predictions import SCORED_K, normalize_synonym
from search.schema.flyaoc import AnnotationCount, Issue, ValidationReport

MAX_DESCRIPTION = 100
MAX_EVIDENCE_TEXT = 500

#: qualifiers FlyAOC accepts, with the GO aspect each belongs to (OUTPUT_SPEC.md)
QUALIFIER_ASPECT: dict[str, str] = {
    "located_in": "C", "part_of": "C", "is_active_in": "C", "colocalizes_with": "C",
    "enables": "F", "contributes_to": "F",
    "involved_in": "P", "acts_upstream_of": "P", "acts_upstream_of_positive_effect": "P",
    "acts_upstream_of_negative_effect": "P", "acts_upstream_of_or_within": "P",
    "acts_upstream_of_or_within_positive_effect": "P", "acts_upstream_of_or_within_negative_effect": "P",
}
ASPECTS = ("P", "F", "C")
EXPRESSION_TYPES = ("polypeptide", "transcript")

Lookup = Callable[[str], Term | None]


def lookup_in(ontologies: Iterable[Any]) -> Lookup:
    """A lookup over loaded :class:`search.ontology.model.Ontology` objects that resolves alternative ids."""
    onts = list(ontologies)

    def lookup(term_id: str) -> Term | None:
        for ont in onts:
            primary = ont.resolve(term_id)
            if primary is not None:
                return ont.get(primary)
        return None

    return lookup


def validate_output(obj: Any, *, lookup: Lookup | None = None, hidden: Container[str] = frozenset(),
                    read_pmcids: Collection[str] | None = None, gene_id: str | None = None) -> ValidationReport:
    """Check one prediction object.

    ``lookup`` finds a term by primary or alternative id (None: ids are only checked for format); ``hidden`` holds
    the session's hidden ids (already expanded to descendants); ``read_pmcids`` the papers the session read (None:
    evidence is not checked); ``gene_id`` the session's gene.
    """
    v = _Validator(lookup, hidden, read_pmcids)
    v.check(obj, gene_id)
    errors = [str(i) for i in v.issues if i.severity == "error"]
    return ValidationReport(valid=not errors, errors=errors,
                            warnings=[str(i) for i in v.issues if i.severity == "warning"],
                            annotation_count=annotation_count(obj), issues=v.issues)


def annotation_count(obj: Any) -> AnnotationCount:
    """Items per task as FlyAOC counts them (§2.5): array lengths, synonyms fullname + symbol."""
    if not isinstance(obj, Mapping):
        return AnnotationCount()
    syn = obj.get("task3_synonyms")
    syn = syn if isinstance(syn, Mapping) else {}
    return AnnotationCount(task1_go_terms=_len(obj.get("task1_function")),
                           task2_expression=_len(obj.get("task2_expression")),
                           task3_synonyms=_len(syn.get("fullname_synonyms")) + _len(syn.get("symbol_synonyms")))


def _len(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def _kind(value: Any) -> str:
    """JSON type name of a Python value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


class _Validator:
    def __init__(self, lookup: Lookup | None, hidden: Container[str], read_pmcids: Collection[str] | None):
        self.lookup = lookup
        self.hidden = hidden
        self.read = set(read_pmcids) if read_pmcids is not None else None
        self.issues: list[Issue] = []

    def error(self, path: str, message: str, code: str = "format") -> None:
        self.issues.append(Issue(path=path, severity="error", code=code, message=message))

    def warn(self, path: str, message: str, code: str, suggestions: Iterable[str] = ()) -> None:
        self.issues.append(Issue(path=path, severity="warning", code=code, message=message,
                                 suggestions=list(suggestions)))

    # ---- primitives -------------------------------------------------------------------------------------------
    def string(self, path: str, value: Any, pattern: re.Pattern | None = None, max_len: int | None = None) -> bool:
        if not isinstance(value, str):
            self.error(path, f"Expected a string, got {_kind(value)}")
            return False
        if pattern is not None and not pattern.fullmatch(value):
            self.error(path, f"Invalid format: {value!r}")
            return False
        if max_len is not None and len(value) > max_len:
            self.error(path, f"Too long: {len(value)} characters (at most {max_len})")
            return False
        return True

    def enum(self, path: str, value: Any, allowed: Iterable[str]) -> bool:
        allowed = tuple(allowed)
        if value not in allowed or not isinstance(value, str):
            self.error(path, f"Invalid value {value!r}: expected one of {', '.join(allowed)}")
            return False
        return True

    def required(self, path: str, item: Mapping, keys: Iterable[str]) -> None:
        for key in keys:
            if key not in item:
                self.error(f"{path}.{key}" if path else key, "Required field missing")

    # ---- the object -------------------------------------------------------------------------------------------
    def check(self, obj: Any, session_gene: str | None) -> None:
        if not isinstance(obj, Mapping):
            self.error("(root)", f"Expected an object, got {_kind(obj)}")
            return
        self.required("", obj, ("gene_id", "gene_symbol", "task1_function", "task2_expression", "task3_synonyms"))
        if "gene_id" in obj and self.string("gene_id", obj["gene_id"], GENE_ID) and session_gene \
                and obj["gene_id"] != session_gene:
            self.warn("gene_id", f"{obj['gene_id']} is not this session's gene {session_gene}", "wrong_gene")
        if "gene_symbol" in obj:
            self.string("gene_symbol", obj["gene_symbol"])
        if "task1_function" in obj:
            self.array("task1_function", obj["task1_function"], self.go_item)
        if "task2_expression" in obj:
            self.array("task2_expression", obj["task2_expression"], self.expression_item)
        if "task3_synonyms" in obj:
            self.synonyms(obj["task3_synonyms"])
        if not any(i.severity == "error" for i in self.issues):
            self.ranks(obj)

    def array(self, path: str, value: Any, check_item: Callable[[str, Any], None]) -> None:
        if not isinstance(value, list):
            self.error(path, f"Expected an array, got {_kind(value)}")
            return
        for i, item in enumerate(value):
            p = f"{path}[{i}]"
            if isinstance(item, Mapping):
                check_item(p, item)
            else:
                self.error(p, f"Expected an object, got {_kind(item)}")

    def go_item(self, path: str, item: Mapping) -> None:
        has_id, has_desc = "go_id" in item, "description" in item
        if has_id and has_desc:
            self.error(path, "Give exactly one of go_id or description, not both")
        elif not has_id and not has_desc:
            self.error(path, "Give exactly one of go_id or description")
        elif has_id:
            if self.string(f"{path}.go_id", item["go_id"], GO_ID):
                self.term(f"{path}.go_id", item["go_id"], "GO", item.get("aspect"))
        else:
            self.string(f"{path}.description", item["description"], max_len=MAX_DESCRIPTION)
        self.required(path, item, ("qualifier", "aspect"))
        qualifier_ok = "qualifier" in item and self.enum(f"{path}.qualifier", item["qualifier"], QUALIFIER_ASPECT)
        aspect_ok = "aspect" in item and self.enum(f"{path}.aspect", item["aspect"], ASPECTS)
        if "is_negated" in item and not isinstance(item["is_negated"], bool):
            self.error(f"{path}.is_negated", f"Expected a boolean, got {_kind(item['is_negated'])}")
        if qualifier_ok and aspect_ok and QUALIFIER_ASPECT[item["qualifier"]] != item["aspect"]:
            self.warn(f"{path}.qualifier", f"{item['qualifier']} is a qualifier for aspect "
                      f"{QUALIFIER_ASPECT[item['qualifier']]}, not {item['aspect']}", "qualifier_aspect")
        self.evidence(path, item)

    def expression_item(self, path: str, item: Mapping) -> None:
        self.required(path, item, ("expression_type",))
        if "expression_type" in item:
            self.enum(f"{path}.expression_type", item["expression_type"], EXPRESSION_TYPES)
        for key, pattern, name in (("anatomy_id", FBBT_ID, "FBbt"), ("stage_id", FBDV_ID, "FBdv")):
            value = item.get(key)
            if value is not None and self.string(f"{path}.{key}", value, pattern):
                self.term(f"{path}.{key}", value, name)
        self.evidence(path, item)

    def synonyms(self, value: Any) -> None:
        if not isinstance(value, Mapping):
            self.error("task3_synonyms", f"Expected an object, got {_kind(value)}")
            return
        self.required("task3_synonyms", value, ("fullname_synonyms", "symbol_synonyms"))
        for key in ("fullname_synonyms", "symbol_synonyms"):
            if key not in value:
                continue
            path, names = f"task3_synonyms.{key}", value[key]
            if not isinstance(names, list):
                self.error(path, f"Expected an array, got {_kind(names)}")
                continue
            for i, name in enumerate(names):
                self.string(f"{path}[{i}]", name)

    def evidence(self, path: str, item: Mapping) -> None:
        if "evidence" not in item:
            return
        ev, path = item["evidence"], f"{path}.evidence"
        if not isinstance(ev, Mapping):
            self.error(path, f"Expected an object, got {_kind(ev)}")
            return
        # "pmcid": null is FlyAOC's memorization evidence (prior knowledge, no paper): valid, as in its validator
        if ev.get("pmcid") is not None and self.string(f"{path}.pmcid", ev["pmcid"], PMCID) \
                and self.read is not None and ev["pmcid"] not in self.read:
            self.warn(f"{path}.pmcid", f"{ev['pmcid']} was not read in this session", "evidence_not_read")
        if "text" in ev:
            self.string(f"{path}.text", ev["text"], max_len=MAX_EVIDENCE_TEXT)

    # ---- advice -----------------------------------------------------------------------------------------------
    def term(self, path: str, term_id: str, ontology: str, aspect: Any = None) -> None:
        """Hidden (error), unknown, obsolete, alternative and wrong-aspect ids (warnings)."""
        term = self.lookup(term_id) if self.lookup else None
        if term_id in self.hidden or (term is not None and term.id in self.hidden):
            self.error(path, f"{term_id} is hidden in this session: describe the concept in 'description' "
                             f"(a short term name, at most {MAX_DESCRIPTION} characters) instead of go_id",
                       code="hidden_term")
            return
        if self.lookup is None:
            return
        if term is None:
            self.warn(path, f"{term_id} is not a known {ontology} term; it can only match exactly", "unknown_term")
            return
        if term.obsolete:
            message = f"{term_id} ({term.name}) is obsolete and scores nothing"
            if term.replaced_by:
                message += f"; replaced by {', '.join(term.replaced_by)}"
            elif term.consider:
                message += f"; consider {', '.join(term.consider)}"
            self.warn(path, message, "obsolete_term", term.replaced_by or term.consider)
            return
        if term.id != term_id:
            self.warn(path, f"{term_id} is an alternative id of {term.id} ({term.name})", "alt_id", [term.id])
        if aspect in ASPECTS and term.aspect and term.aspect != aspect:
            self.warn(path, f"{term_id} ({term.name}) has aspect {term.aspect}, not {aspect}", "wrong_aspect")

    def ranks(self, obj: Mapping) -> None:
        """Duplicates and items ranked past FlyAOC's cut-offs (only on a well-formed object)."""
        self.ranked("task1_function", [(i, it.get("go_id")) for i, it in enumerate(obj["task1_function"])],
                    SCORED_K["go"], "GO@")
        self.ranked("task2_expression", [(i, it.get("anatomy_id")) for i, it in enumerate(obj["task2_expression"])],
                    SCORED_K["anatomy"], "anatomy@", duplicates=False)
        syn = obj["task3_synonyms"]
        combined = [(f"fullname_synonyms[{i}]", s) for i, s in enumerate(syn["fullname_synonyms"])] + \
                   [(f"symbol_synonyms[{i}]", s) for i, s in enumerate(syn["symbol_synonyms"])]
        self.ranked("task3_synonyms", combined, SCORED_K["synonyms"], "synonyms@", normalise=normalize_synonym)

    def ranked(self, path: str, items: list[tuple[Any, Any]], k: int, metric: str, duplicates: bool = True,
               normalise: Callable[[str], str] | None = None) -> None:
        seen: set[str] = set()
        repeats: list[str] = []
        for pos, value in items:
            if not value:
                continue
            key = normalise(value) if normalise else value
            where = f"[{pos}]" if isinstance(pos, int) else pos
            item_path = f"{path}{where}" if isinstance(pos, int) else f"{path}.{where}"
            if key in seen:
                repeats.append(where)
                continue
            seen.add(key)
            if len(seen) == k + 1:
                self.warn(item_path, f"items from here on are beyond rank {k} and are not scored ({metric}{k}); "
                                     "put the most confident first", "beyond_scored_rank")
        if duplicates and repeats:
            how = " (ignoring case and outer spaces)" if normalise else ""
            shown = ", ".join(repeats[:10]) + (", …" if len(repeats) > 10 else "")
            self.warn(path, f"{len(repeats)} item(s) repeat earlier ones{how} and score nothing: {shown}",
                      "duplicate")
