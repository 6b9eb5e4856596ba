"""The embedded term index: one tantivy index per ontology, for term search (the engine's ``write_terms`` /
``search_terms``).

Layout: ``<data_dir>/terms/<name>`` is a symlink to ``versions/<name>-<id>/``. ``write`` builds a new version
beside the live one and swaps the symlink with one atomic ``rename``, so a reader sees the old index or the new one,
never a mix; readers compare the link target on each search and reopen when it changed.

What is searched and how it scores is :mod:`search.text.term_search` (shared with the cluster engine), written here as
tantivy queries over the word view of :mod:`search.text.analysis`.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path

import tantivy

from search.core.errors import IndexMissing, NotFound
from search.core.models import Term, TermHit
from search.core.names import check_ontology, is_valid, lookup
from search.text import analysis
from search.text.analysis import normalise, query_variants
from search.text.term_search import (
    COVERAGE_BOOST,
    FIELD_BOOSTS,
    LABEL_FIELDS,
    NAME_KEY_BOOST,
    SYNONYM_FIELDS,
    SYNONYM_KEY_BOOST,
    TIE,
    id_query,
    term_hit,
    variant_keys,
)

WRITER_HEAP = 64_000_000


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
    index.register_tokenizer(analysis.WORD_ANALYZER, analysis.ANALYZERS[analysis.WORD_ANALYZER])
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
        term_id = id_query(query)
        tokens: list[str] = []
        if term_id:
            main = tantivy.Query.term_query(schema, "ids", term_id)
            include_obsolete = True
        else:
            variants = query_variants(query)
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
        return [term_hit(ontology_name, searcher.doc(addr).to_dict(), score, set(tokens))
                for score, addr in result.hits]


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
    for key in variant_keys(variants):
        shoulds.append(tantivy.Query.boost_query(tantivy.Query.term_query(schema, "key", key), NAME_KEY_BOOST))
        shoulds.append(tantivy.Query.boost_query(tantivy.Query.term_query(schema, "syn_key", key), SYNONYM_KEY_BOOST))
    tokens = variants[-1]
    if len(tokens) > 1:
        every_word = tantivy.Query.boolean_query([
            (tantivy.Occur.Must, tantivy.Query.boolean_query(
                [(tantivy.Occur.Should, tantivy.Query.term_query(schema, f, t)) for f in LABEL_FIELDS]))
            for t in dict.fromkeys(tokens)])
        shoulds.append(tantivy.Query.boost_query(tantivy.Query.const_score_query(every_word, 1.0), COVERAGE_BOOST))
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in shoulds])

