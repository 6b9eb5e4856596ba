"""The embedded term index: one tantivy index per ontology, for term search (the engine's ``write_terms`` /
``search_terms``).

Layout: ``<data_dir>/terms/<name>`` is a symlink to ``versions/<name>-<id>/``. ``write`` builds a new version
beside the live one and swaps the symlink with one atomic ``rename``, so a reader sees the old index or the new one,
never a mix; readers compare the link target on each search and reopen when it changed.

Scoring (BM25 over the word view of ``search.text.analysis``): the best field wins (dis-max) among the name, synonyms by
scope (EXACT > NARROW/BROAD > RELATED) and the definition; an exact match of the whole normalised query with the
name or a synonym, and every query word being found in name/synonyms, add bonuses. A query that is a term id
(``GO:0005634``, or an alt id) finds that term. Hidden ids and the aspect are filters inside the query, so
``limit`` hits come back whatever is hidden; obsolete terms are left out unless asked for (an id query finds its
term even when obsolete, flagged).
"""

from __future__ import annotations

from typing import Any

import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path

import tantivy

from search.text import analysis
from search.engines.embedded.engine import ANALYZERS, analyze
from search.core.errors import IndexMissing, NotFound
from search.core.models import Term, TermHit
from search.core.names import PATTERNS, check_ontology, is_valid, lookup
from search.ontology.model import canonical_label

WRITER_HEAP = 64_000_000
DEFINITION_CHARS = 300
#: ontology names (one home: :mod:`search.core.names`); kept here for the cluster engine's term aliases
NAME_RE = PATTERNS["ontology"]
ID_QUERY_RE = re.compile(r"\s*([A-Za-z][A-Za-z0-9_]*:[A-Za-z0-9_.\-]+)\s*")

#: text field → boost (dis-max: a term's best field counts, plus TIE × the others)
FIELD_BOOSTS: dict[str, float] = {
    "name": 3.0, "syn_exact": 2.6, "syn_narrow": 2.0, "syn_broad": 2.0, "syn_related": 1.6, "definition": 0.6,
}
SYNONYM_FIELDS = {"EXACT": "syn_exact", "NARROW": "syn_narrow", "BROAD": "syn_broad", "RELATED": "syn_related"}
TIE = 0.2
NAME_KEY_BOOST = 12.0
SYNONYM_KEY_BOOST = 9.0
COVERAGE_BOOST = 3.0


def normalise(text: str) -> str:
    """The word-view tokens of ``text`` joined by spaces: names and synonyms equal under this match exactly."""
    return " ".join(analyze("word", text))


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw")
    sb.add_text_field("ids", stored=False, tokenizer_name="raw")
    sb.add_text_field("key", stored=False, tokenizer_name="raw")
    sb.add_text_field("syn_key", stored=False, tokenizer_name="raw")
    for f in FIELD_BOOSTS:
        sb.add_text_field(f, stored=True, tokenizer_name=analysis.WORD_ANALYZER)
    sb.add_text_field("namespace", stored=True, tokenizer_name="raw")
    sb.add_text_field("aspect", stored=True, tokenizer_name="raw")
    sb.add_text_field("obsolete", stored=True, tokenizer_name="raw")
    return sb.build()


def _register(index: tantivy.Index) -> tantivy.Index:
    index.register_tokenizer(analysis.WORD_ANALYZER, ANALYZERS[analysis.WORD_ANALYZER])
    return index


def _document(term: Term) -> tantivy.Document:
    doc = tantivy.Document(id=term.id, name=term.name, key=normalise(term.name), definition=term.definition,
                           obsolete="1" if term.obsolete else "0")
    for i in [term.id, *term.alt_ids]:
        doc.add_text("ids", i)
    for s in term.synonyms:
        doc.add_text(SYNONYM_FIELDS[s.scope], s.text)
        doc.add_text("syn_key", normalise(s.text))
    if term.namespace:
        doc.add_text("namespace", term.namespace)
    if term.aspect:
        doc.add_text("aspect", term.aspect)
    return doc


class TermIndex:
    """Per-ontology term indices under ``<data_dir>/terms``."""

    def __init__(self, data_dir: Path | str):
        self.root = Path(data_dir) / "terms"
        self._open: dict[str, tuple[str, tantivy.Index, tantivy.Searcher]] = {}
        self._lock = threading.Lock()

    # ---- write side -----------------------------------------------------------------------------------------------
    def write(self, ontology_name: str, terms: Iterable[Term]) -> int:
        """Replace the ontology's index with ``terms``; returns how many were indexed."""
        self._check_name(ontology_name)
        version = f"{ontology_name}-{uuid.uuid4().hex[:12]}"
        path = self.root / "versions" / version
        path.mkdir(parents=True)
        try:
            index = _register(tantivy.Index(_schema(), path=str(path)))
            writer = index.writer(heap_size=WRITER_HEAP, num_threads=1)
            n = 0
            for term in terms:
                writer.add_document(_document(term))
                n += 1
            writer.commit()
            writer.wait_merging_threads()
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        link = self.root / ontology_name
        old = os.readlink(link) if link.is_symlink() else None
        tmp = self.root / f".{ontology_name}.{uuid.uuid4().hex[:8]}"
        os.symlink(Path("versions") / version, tmp)
        os.replace(tmp, link)
        if old:
            shutil.rmtree(self.root / old, ignore_errors=True)
        return n

    # ---- read side ------------------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Ontologies with a live index."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_symlink() and is_valid("ontology", p.name))

    def count(self, ontology_name: str) -> int:
        return self._searcher(ontology_name).num_docs

    def counts(self) -> dict[str, int]:
        return {n: self.count(n) for n in self.names()}

    @staticmethod
    def _check_name(name: str) -> None:
        check_ontology(name)

    def _searcher(self, name: str) -> tantivy.Searcher:
        """The open index of a name found among :meth:`names` (a malformed name is a 422, an unknown one a 404)."""
        link = self.root / lookup("ontology", name, self.names(), hint="it has no term index")
        try:
            target = os.readlink(link)
        except OSError:   # removed since the listing
            raise NotFound(f"unknown ontology name {name!r}: it has no term index",
                           details={"valid": self.names()}) from None
        cached = self._open.get(name)
        if cached is None or cached[0] != target:
            with self._lock:
                cached = self._open.get(name)
                if cached is None or cached[0] != target:
                    try:
                        index = _register(tantivy.Index.open(str(self.root / target)))
                    except ValueError as e:
                        raise IndexMissing(f"term index {name!r} unreadable: {e}") from None
                    cached = (target, index, index.searcher())
                    self._open[name] = cached
        return cached[2]

    def search(self, ontology_name: str, query: str, aspect: str | None = None, limit: int = 10,
               exclude_ids: Iterable[str] = frozenset(), include_obsolete: bool = False) -> list[TermHit]:
        """Terms best matching ``query``, hidden ids (``exclude_ids``) and other aspects filtered in the query."""
        searcher = self._searcher(ontology_name)
        schema = self._open[ontology_name][1].schema
        m = ID_QUERY_RE.fullmatch(query)
        tokens: list[str] = []
        if m:
            main = tantivy.Query.term_query(schema, "ids", m.group(1))
            include_obsolete = True
        else:
            variants = [analyze("word", v) for v in dict.fromkeys([query, canonical_label(query)])]
            tokens = list(dict.fromkeys(t for v in variants for t in v))
            if not tokens:
                return []
            main = _text_query(schema, variants)
        musts = [(tantivy.Occur.Must, main)]
        if aspect:
            musts.append((tantivy.Occur.Must, tantivy.Query.term_query(schema, "aspect", aspect)))
        if not include_obsolete:
            musts.append((tantivy.Occur.MustNot, tantivy.Query.term_query(schema, "obsolete", "1")))
        exclude = sorted(exclude_ids)
        if exclude:
            musts.append((tantivy.Occur.MustNot, tantivy.Query.term_set_query(schema, "id", exclude)))
        q = tantivy.Query.boolean_query(musts) if len(musts) > 1 else main
        result = searcher.search(q, limit=max(1, limit), count=False)
        return [term_hit(ontology_name, searcher.doc(addr).to_dict(), score, set(tokens)) for score, addr in result.hits]


def _text_query(schema: tantivy.Schema, variants: list[list[str]]) -> tantivy.Query:
    """Dis-max over fields of all variants' tokens, plus exact-label bonuses for each variant and a bonus when
    every token of the last (canonical) variant is in the name or a synonym."""
    tokens = list(dict.fromkeys(t for v in variants for t in v))
    per_field = []
    for field, boost in FIELD_BOOSTS.items():
        q = (tantivy.Query.term_query(schema, field, tokens[0]) if len(tokens) == 1 else
             tantivy.Query.boolean_query([(tantivy.Occur.Should, tantivy.Query.term_query(schema, field, t))
                                          for t in tokens]))
        per_field.append(tantivy.Query.boost_query(q, boost))
    shoulds = [tantivy.Query.disjunction_max_query(per_field, TIE)]
    for key in dict.fromkeys(" ".join(v) for v in variants if v):
        shoulds.append(tantivy.Query.boost_query(tantivy.Query.term_query(schema, "key", key), NAME_KEY_BOOST))
        shoulds.append(tantivy.Query.boost_query(tantivy.Query.term_query(schema, "syn_key", key), SYNONYM_KEY_BOOST))
    tokens = variants[-1]
    if len(tokens) > 1:
        label_fields = ["name", *SYNONYM_FIELDS.values()]
        every_word = tantivy.Query.boolean_query([
            (tantivy.Occur.Must, tantivy.Query.boolean_query(
                [(tantivy.Occur.Should, tantivy.Query.term_query(schema, f, t)) for f in label_fields]))
            for t in dict.fromkeys(tokens)])
        shoulds.append(tantivy.Query.boost_query(tantivy.Query.const_score_query(every_word, 1.0), COVERAGE_BOOST))
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in shoulds])


def term_hit(ontology: str, d: dict[str, list[Any]], score: float, tokens: set[str]) -> TermHit:
    """A hit from a term's stored fields (each a list of values, as tantivy's ``Document.to_dict()`` gives them);
    the cluster engine builds its hits with it too. ``matched_synonym``: the synonym sharing most query tokens."""
    name = d.get("name", [""])[0]
    matched = None
    if tokens:
        best = len(tokens & set(analyze("word", name)))
        for field in SYNONYM_FIELDS.values():
            for syn in d.get(field, []):
                overlap = len(tokens & set(analyze("word", syn)))
                if overlap > best:
                    best, matched = overlap, syn
    definition = d.get("definition", [""])[0]
    if len(definition) > DEFINITION_CHARS:
        definition = definition[:DEFINITION_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return TermHit(id=d["id"][0], ontology=ontology, name=name, namespace=(d.get("namespace") or [None])[0],
                   aspect=(d.get("aspect") or [None])[0], matched_synonym=matched, definition=definition,
                   score=round(score, 4), obsolete=d.get("obsolete", ["0"])[0] == "1")
