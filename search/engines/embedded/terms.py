"""The embedded term index: one tantivy index per ontology, for term search (the engine's ``write_terms`` /
``search_terms``).

Layout: ``<data_dir>/terms/<name>`` is a symlink to ``versions/<name>-<id>/``. ``write`` builds a new version
beside the live one and swaps the symlink with one atomic ``rename``, so a reader sees the old index or the new one,
never a mix; readers compare the link target on each search and reopen when it changed.

Candidates for the re-ranker (:meth:`TermIndex.candidates`) come back as ``(id, score)`` without reading a stored
document: each term carries its write position in the fast field ``row``, and the version keeps the ids in that
order (``ids.json``, beside tantivy's files). Only the few hits a search returns are read (:meth:`TermIndex.hits`).
Versions written before ``row`` existed are read through their stored ids.

What is searched and how it scores is :mod:`search.text.term_search` (shared with the cluster engine), written here as
tantivy queries over the word view of :mod:`search.text.analysis`.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path

import tantivy

from search.core.errors import IndexMissing, NotFound
from search.core.models import Term, TermHit
from search.core.names import check_ontology, is_valid, lookup
from search.engines.embedded.match import any_of
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
    engine_score,
    id_query,
    term_hit,
    variant_keys,
)

WRITER_HEAP = 64_000_000
#: the ids of a version in write order (``row`` → id), inside the version's directory
IDS_FILE = "ids.json"
#: a directory listing is reused while the directory's mtime is unchanged and older than this (mtimes move in ticks)
LISTING_SETTLED_NS = 2_000_000_000


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
    sb.add_unsigned_field("row", stored=False, indexed=False, fast=True)
    return sb.build()


def _register(index: tantivy.Index) -> tantivy.Index:
    index.register_tokenizer(analysis.WORD_ANALYZER, analysis.ANALYZERS[analysis.WORD_ANALYZER])
    return index


def _document(term: Term, row: int) -> tantivy.Document:
    doc = tantivy.Document(id=term.id, name=term.name, key=normalise(term.name), definition=term.definition,
                           obsolete="1" if term.obsolete else "0")
    doc.add_unsigned("row", row)
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
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()
        self._names: tuple[tuple[int, int], list[str]] | None = None

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
            ids: list[str] = []
            for term in terms:
                writer.add_document(_document(term, len(ids)))
                ids.append(term.id)
            writer.commit()
            writer.wait_merging_threads()
            (path / IDS_FILE).write_text(json.dumps(ids))
            n = len(ids)
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
        """Ontologies with a live index (the listing is kept while the directory is unchanged: a search asks for it)."""
        try:
            st = self.root.stat()
        except OSError:
            return []
        key = (st.st_ino, st.st_mtime_ns)
        if self._names is not None and self._names[0] == key:
            return list(self._names[1])
        names = sorted(p.name for p in self.root.iterdir() if p.is_symlink() and is_valid("ontology", p.name))
        if time.time_ns() - st.st_mtime_ns > LISTING_SETTLED_NS:   # a change within the clock's tick would not show
            self._names = (key, names)
        return list(names)

    def count(self, ontology_name: str) -> int:
        return self._opened(ontology_name).searcher.num_docs

    def counts(self) -> dict[str, int]:
        return {n: self.count(n) for n in self.names()}

    @staticmethod
    def _check_name(name: str) -> None:
        check_ontology(name)

    def _opened(self, name: str) -> _Open:
        """The open index of a name found among :meth:`names` (a malformed name is a 422, an unknown one a 404)."""
        link = self.root / lookup("ontology", name, self.names(), hint="it has no term index")
        try:
            target = os.readlink(link)
        except OSError:   # removed since the listing
            raise NotFound(f"unknown ontology name {name!r}: it has no term index",
                           details={"valid": self.names()}) from None
        cached = self._open.get(name)
        if cached is None or cached.target != target:
            with self._lock:
                cached = self._open.get(name)
                if cached is None or cached.target != target:
                    cached = self._open[name] = _Open.of(target, self.root / target, name)
        return cached

    def search(self, ontology_name: str, query: str, aspect: str | None = None, limit: int = 10,
               exclude_ids: Iterable[str] = frozenset(), include_obsolete: bool = False) -> list[TermHit]:
        """Terms best matching ``query``, hidden ids (``exclude_ids``) and other aspects filtered in the query."""
        opened = self._opened(ontology_name)
        q, tokens = _query(opened.schema, query, aspect, exclude_ids, include_obsolete)
        if q is None:
            return []
        searcher = opened.searcher
        result = searcher.search(q, limit=max(1, limit), count=False)
        return [term_hit(ontology_name, searcher.doc(addr).to_dict(), score, tokens) for score, addr in result.hits]

    def candidates(self, ontology_name: str, queries: Sequence[tuple[str, int]], aspect: str | None = None,
                   exclude_ids: Iterable[str] = frozenset(), include_obsolete: bool = False
                   ) -> list[list[tuple[str, float]]]:
        """For each ``(query, limit)``, the ids and scores :meth:`search` would return, without reading a stored
        document (the re-ranker looks at many candidates and returns few)."""
        opened = self._opened(ontology_name)
        exclude = frozenset(exclude_ids)
        drop = None if include_obsolete else opened.obsolete   # None: the query itself leaves obsolete terms out
        out: list[list[tuple[str, float]]] = []
        for text, limit in queries:
            q, _ = _query(opened.schema, text, aspect, exclude, include_obsolete or drop is not None)
            if q is None:
                out.append([])
                continue
            hits = opened.top(q, max(1, limit), drop)
            ids = opened.ids_of([addr for _, addr in hits])
            out.append([(i, engine_score(s)) for i, (s, _) in zip(ids, hits, strict=True)])
            opened.seen.update(zip(ids, (addr for _, addr in hits), strict=True))
        return out

    def hits(self, ontology_name: str, ids: Sequence[str], tokens: Iterable[str] = ()) -> list[TermHit]:
        """The terms ``ids`` as hits (score 0, ``matched_synonym`` against ``tokens``), in that order; ids not in the
        index are left out."""
        opened = self._opened(ontology_name)
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        searcher = opened.searcher
        addrs = [opened.seen[i] for i in wanted if i in opened.seen]
        unseen = [i for i in wanted if i not in opened.seen]
        if unseen:
            addrs += [addr for _, addr in searcher.search(any_of(opened.schema, "id", unseen),
                                                          limit=len(unseen), count=False).hits]
        toks = set(tokens)
        by_id = {h.id: h for h in (term_hit(ontology_name, searcher.doc(addr).to_dict(), 0.0, toks) for addr in addrs)}
        return [by_id[i] for i in wanted if i in by_id]


class _Open:
    """One opened version of an ontology's term index: its searcher, and its ids by ``row`` when it has them."""

    def __init__(self, target: str, index: tantivy.Index, ids: list[str] | None):
        self.target = target
        self.schema = index.schema
        self.searcher = index.searcher()
        self._ids = ids
        #: where candidates were found (id → address in this searcher), so their hits are read without a search
        self.seen: dict[str, tantivy.DocAddress] = {}

    @classmethod
    def of(cls, target: str, path: Path, name: str) -> _Open:
        try:
            index = _register(tantivy.Index.open(str(path)))
        except ValueError as e:
            raise IndexMissing(f"term index {name!r} unreadable: {e}") from None
        opened = cls(target, index, None)
        try:
            ids = json.loads((path / IDS_FILE).read_bytes())
            if isinstance(ids, list) and len(ids) == opened.searcher.num_docs and set(map(type, ids)) <= {str}:
                opened._ids = ids
        except (OSError, ValueError, RecursionError):
            pass   # a version written before rows, or a damaged list: ids are read from the stored documents
        return opened

    @cached_property
    def obsolete(self) -> frozenset[int] | None:
        """The rows of obsolete terms (None for a version without rows: the query filters them instead)."""
        if self._ids is None:
            return None
        q = tantivy.Query.term_query(self.schema, "obsolete", "1")
        addrs = [a for _, a in self.searcher.search(q, limit=max(1, self.searcher.num_docs), count=False).hits]
        rows = [r for r in self.searcher.fast_field_values("row", addrs) if isinstance(r, int)] if addrs else []
        return frozenset(rows) if len(rows) == len(addrs) else None

    def top(self, q: tantivy.Query, limit: int, drop: frozenset[int] | None
            ) -> list[tuple[float, tantivy.DocAddress]]:
        """The best ``limit`` hits of ``q`` whose row is not in ``drop``. The rows are dropped here, not by a
        ``MustNot`` clause, which cost ~0.2 ms of a ~1.5 ms GO engine search; more hits are asked for until
        ``limit`` are kept or there are no more, so the answer is the filtered query's."""
        if not drop:
            return self.searcher.search(q, limit=limit, count=False).hits
        n = limit + min(len(drop), max(8, limit // 4))
        while True:
            hits = self.searcher.search(q, limit=n, count=False).hits
            rows = self.searcher.fast_field_values("row", [a for _, a in hits]) if hits else []
            kept = [h for h, r in zip(hits, rows, strict=True) if r not in drop]
            if len(kept) >= limit or len(hits) < n:
                return kept[:limit]
            n *= 4

    def ids_of(self, addrs: list[tantivy.DocAddress]) -> list[str]:
        if self._ids is not None and addrs:
            rows = [r for r in self.searcher.fast_field_values("row", addrs) if isinstance(r, int)]
            if len(rows) == len(addrs) and all(0 <= r < len(self._ids) for r in rows):
                return [self._ids[r] for r in rows]
        return [str(self.searcher.doc(a).get_first("id")) for a in addrs]


def _query(schema: tantivy.Schema, query: str, aspect: str | None, exclude_ids: Iterable[str],
           include_obsolete: bool) -> tuple[tantivy.Query | None, set[str]]:
    """The tantivy query of a term search and the tokens hits are explained with; ``(None, ∅)`` when the query has
    no token (nothing can match)."""
    term_id = id_query(query)
    tokens: list[str] = []
    if term_id:
        main = tantivy.Query.term_query(schema, "ids", term_id)
        include_obsolete = True
    else:
        variants = query_variants(query)
        tokens = list(dict.fromkeys(t for v in variants for t in v))
        if not tokens:
            return None, set()
        main = _text_query(schema, variants)
    musts = [(tantivy.Occur.Must, main)]
    if aspect:
        musts.append((tantivy.Occur.Must, tantivy.Query.term_query(schema, "aspect", aspect)))
    if not include_obsolete:
        musts.append((tantivy.Occur.MustNot, tantivy.Query.term_query(schema, "obsolete", "1")))
    exclude = sorted(exclude_ids)
    if exclude:
        musts.append((tantivy.Occur.MustNot, any_of(schema, "id", exclude)))
    return (tantivy.Query.boolean_query(musts) if len(musts) > 1 else main), set(tokens)
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

