"""The term service: search, lookup, hierarchy walks and FlyAOC-shaped records over the indexed ontologies, with
hidden terms applied everywhere, and the description → term resolver.

What it reads from ``<data_dir>``: ``ontologies/<name>.ontology.json.gz`` (the compact ontology the indexer writes;
reloaded when the file changes) for lookups and the DAG, ``ontologies/<name>.rerank.npz`` (the re-ranker's model,
written with it) and the configured engine's term index (``Engine.term_candidates``, the same search in every engine)
for search. A search reads only the model and the term index: the ontology is loaded for hidden terms and lookups.
An ontology name from a request is checked against :mod:`search.core.names` and then looked up in a listing of that
directory; only the listing's path is opened, and nothing there is a pickle (``*.pkl`` files of earlier versions are
reported, never read; the model's ``.npz`` is mapped by :func:`_map_npz`, which accepts plain numeric members only).
"""

from __future__ import annotations

import io
import json
import math
import mmap
import operator
import os
import struct
import tempfile
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import regex
from pydantic import BaseModel, Field

from search.core.errors import IndexMissing, InvalidRequest, NotFound
from search.core.models import Synonym, Term, TermHit
from search.core.names import check_ontology, is_valid, lookup
from search.engines import TermEngine, open_local
from search.ontology.hidden import DEFAULT_RELATIONS, HiddenSet, expand, parse_hidden
from search.ontology.model import (
    GO_ASPECTS,
    IS_A,
    KNOWN,
    RELATION_SETS,
    SUFFIX,
    Ontology,
    spec_for_id,
)
from search.text import analysis
from search.text.analysis import canonical_label, query_variants, stem
from search.text.morphology import Morphology
from search.text.spelling import Speller, max_edits
from search.text.term_search import id_query

if TYPE_CHECKING:
    from search.ontology.dense_terms import DenseTermIndexes
    from search.ontology.encoder.runtime import TermEncoders

ASPECTS = ("P", "F", "C")
MAX_LIMIT = 100
MAX_QUERY_CHARS = 1000
FLYAOC_NOT_FOUND = "Term not found in ontology"
FLYAOC_BAD_PREFIX = "Unknown ontology prefix. Use GO:, FBbt:, or FBdv:"
#: file names under ``<data_dir>/ontologies``: the compact ontology and the re-ranker's model
ONTOLOGY_FILE = ".ontology" + SUFFIX
MODEL_FILE = ".rerank.npz"
#: the model's file before it was an ``.npz`` (removed when an ontology is indexed again)
OLD_MODEL_FILE = ".rerank" + SUFFIX
LEGACY_FILE = ".pkl"
#: a directory listing is reused while the directory's mtime is unchanged and older than this (mtimes move in ticks)
LISTING_SETTLED_NS = 2_000_000_000


class TermRef(BaseModel):
    id: str
    name: str
    obsolete: bool = False


class TermLookup(BaseModel):
    """A term looked up by id. ``note`` explains an alt id (resolved to its primary) or an obsolete term."""

    requested_id: str
    id: str
    note: str | None = None
    term: Term
    replacements: list[TermRef] = Field(default_factory=list,
                                        description="replaced_by then consider, for obsolete terms")
    children_count: int = Field(0, description="Visible direct is_a children")


class TermList(BaseModel):
    """Ancestors, descendants or children of a term over some relations (hidden terms left out)."""

    id: str
    relations: list[str]
    total: int
    truncated: bool = False
    terms: list[TermRef]


class TermSearchResponse(BaseModel):
    ontology: str
    query: str
    aspect: str | None = None
    hidden: int = Field(0, description="How many ids were hidden from this search")
    mode: str = Field("bm25", description="bm25 (the lexical ranking), dense or hybrid (the lexical ranking fused "
                                          "with the term encoder, or RRF with the dense term index)")
    activity_shaped: bool | None = Field(None, description="GO only: whether the query names a molecular function "
                                                           "(docs/ontologies.md, the MF rule)")
    hits: list[TermHit]


class ResolvedTerm(BaseModel):
    """A candidate term for a free-text description, with the label (name or synonym) that matched best."""

    id: str
    name: str
    aspect: str | None = None
    matched: str
    score: float


class TermResolveResponse(BaseModel):
    """The resolver's answer: an object like every other answer (its list is ``results``)."""

    ontology: str
    text: str
    aspect: str | None = None
    hidden: int = Field(0, description="How many ids were hidden from this resolution")
    results: list[ResolvedTerm]


class TermLabels(BaseModel):
    """One live term's labels for the bulk export (``GET /v1/terms/{ontology}/labels``): name, every synonym with its
    scope, and what ranks or filters it (aspect, depth, direct parents by relation)."""

    id: str
    name: str
    aspect: Literal["P", "F", "C"] | None = None
    depth: int = Field(0, description="Longest is_a path to a root")
    synonyms: list[Synonym] = Field(default_factory=list)
    parents: dict[str, list[str]] = Field(default_factory=dict)


class TermLabelPage(BaseModel):
    ontology: str
    version: str = Field(description="Digest of the served labels (and hidden ids); also the ETag. A cursor is "
                                     "only valid for the version it was issued with")
    total: int = Field(description="Live terms visible to the caller")
    offset: int
    terms: list[TermLabels]
    next_cursor: str | None = Field(None, description="Pass unchanged for the next page; null on the last page")


def _bool(value: bool | str | None) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


class TermService:
    """Everything the API and CLI do with terms, for the ontologies indexed in ``data_dir``.

    Term search goes to ``engine``: the API and CLI pass the configured one (``open_engine``), so in cluster mode
    terms are searched on the cluster the indexer wrote them to. Without one, the embedded engine of ``data_dir``
    (tools and tests that hold a folder)."""

    def __init__(self, data_dir: Path | str, engine: TermEngine | None = None):
        self.data_dir = Path(data_dir)
        self.engine: TermEngine = engine if engine is not None else open_local(self.data_dir)
        self._onts: dict[str, tuple[int, Ontology]] = {}
        self._lex: dict[str, tuple[tuple[int, int | None], RerankModel]] = {}
        self._lock = threading.RLock()
        self._listed: tuple[tuple[int, int], dict[str, Path], set[str]] | None = None
        # per service: a class-level lru_cache would key on (and keep alive) every service ever made
        self._hidden = lru_cache(maxsize=64)(self._expand_hidden)

    @cached_property
    def dense(self) -> DenseTermIndexes:
        """The dense term indexes (optional: mode dense/hybrid), imported on first use: a ``flysift terms`` call in
        bm25 mode does not pay for the dense module's imports."""
        from search.ontology.dense_terms import DenseTermIndexes

        return DenseTermIndexes(self.data_dir)

    @cached_property
    def encoders(self) -> TermEncoders:
        """The data dir's term encoder (search.ontology.encoder), imported when the data dir has one."""
        from search.ontology.encoder.runtime import TermEncoders

        return TermEncoders(self.data_dir)

    def _default_mode(self, ontology: str) -> str:
        """hybrid when the data dir holds a term encoder that fits the served ontology, else bm25 (as before)."""
        from search.ontology import encoder

        if not encoder.present(self.data_dir):
            return "bm25"
        ok = self.encoders.usable(ontology, lambda: self.ontology(ontology), self._indexed(ontology))
        return "hybrid" if ok else "bm25"

    # ---- ontologies -----------------------------------------------------------------------------------------------
    def ontology_path(self, name: str) -> Path:
        """Where the indexer writes ontology ``name`` (readers go through :meth:`_listing`)."""
        return self.data_dir / "ontologies" / (check_ontology(name) + ONTOLOGY_FILE)

    def _listing(self) -> tuple[dict[str, Path], set[str]]:
        """The registry: indexed ontology name → its file, and names only found as pickles of earlier versions."""
        d = self.data_dir / "ontologies"
        found: dict[str, Path] = {}
        legacy: set[str] = set()
        try:
            st = d.stat()
            key = (st.st_ino, st.st_mtime_ns)
            if self._listed is not None and self._listed[0] == key:   # every search asks: keep it while unchanged
                return dict(self._listed[1]), set(self._listed[2])
            entries = list(d.iterdir())
        except OSError:
            return found, legacy
        for p in entries:
            if p.name.endswith(ONTOLOGY_FILE) and is_valid("ontology", n := p.name[:-len(ONTOLOGY_FILE)]):
                found[n] = p
            elif p.name.endswith(LEGACY_FILE) and is_valid("ontology", n := p.name[:-len(LEGACY_FILE)]):
                legacy.add(n)
        legacy -= set(found)
        if time.time_ns() - st.st_mtime_ns > LISTING_SETTLED_NS:   # a change within the clock's tick would not show
            self._listed = (key, dict(found), set(legacy))
        return found, legacy

    def names(self) -> list[str]:
        return sorted(self._listing()[0])

    def valid_names(self) -> list[str]:
        return sorted(set(KNOWN) | set(self.names()))

    def ontology(self, name: str) -> Ontology:
        """The named ontology as last indexed (reloaded when the indexer rewrote it). A malformed name is a 422, an
        unknown one a 404 listing the indexed names, before any file is opened."""
        path, mtime = self._indexed(name)
        run = f"run `flysift index ontology FILE --name {name}`"
        cached = self._onts.get(name)
        if cached is None or cached[0] != mtime:
            with self._lock:
                cached = self._onts.get(name)
                if cached is None or cached[0] != mtime:
                    try:
                        cached = (mtime, Ontology.read(path))
                    except (OSError, ValueError) as e:
                        raise IndexMissing(f"ontology {name!r} cannot be read ({str(e)[:300]}): re-{run}",
                                           details={"ontology": name}) from None
                    self._onts[name] = cached
        return cached[1]

    def _indexed(self, name: str) -> tuple[Path, int]:
        """The file and mtime of indexed ontology ``name``: a malformed name is a 422, an unknown one a 404 listing
        the indexed names, before any file is opened."""
        check_ontology(name)
        found, legacy = self._listing()
        run = f"run `flysift index ontology FILE --name {name}`"
        hint = (f"ontologies/{name}{LEGACY_FILE} is a pickle of an earlier flysift, which is no longer read: re-{run}"
                if name in legacy else f"it is not indexed: {run}" if name in KNOWN else "")
        path = found[lookup("ontology", name, found, hint=hint)]
        try:
            return path, path.stat().st_mtime_ns
        except OSError:   # removed since the listing
            raise NotFound(f"unknown ontology name {name!r}: {run}", details={"valid": self.names()}) from None

    def index_ontology(self, ontology: Ontology,
                       write_terms: Callable[[str, Iterable[Term]], int] | None = None) -> int:
        """Index the terms with ``write_terms`` (the service's engine's unless given), then save the compact ontology
        the service reads."""
        n = (write_terms or self.engine.write_terms)(ontology.name, ontology.terms())
        ontology.save(self.ontology_path(ontology.name))
        self._save_model(ontology.name, RerankModel.learn(ontology))
        return n

    def model_path(self, name: str) -> Path:
        return self.data_dir / "ontologies" / (check_ontology(name) + MODEL_FILE)

    def _save_model(self, name: str, model: RerankModel) -> None:
        """Keep the re-ranker's model beside the ontology (written after it, atomically), so that a service does
        not learn it again on its first search (tens of seconds for GO on a busy machine)."""
        model.save(self.model_path(name))
        (self.data_dir / "ontologies" / (name + OLD_MODEL_FILE)).unlink(missing_ok=True)

    def _load_model(self, name: str) -> RerankModel | None:
        """The saved model, when it was written after the ontology file and reads back (else None: the caller
        learns it again)."""
        path = self.model_path(name)
        try:
            if path.stat().st_mtime_ns < self.ontology_path(name).stat().st_mtime_ns:
                return None
            return RerankModel.load(path)
        except (OSError, ValueError):
            return None

    def _locate(self, term_id: str) -> tuple[Ontology, str]:
        """The ontology holding ``term_id`` and its primary id: 422 for a malformed id, 404 for an unknown one."""
        term_id = term_id.strip()
        spec = spec_for_id(term_id)
        candidates = [spec.name] if spec else [n for n in self.names() if n not in KNOWN]
        for name in candidates:
            ont = self.ontology(name)
            primary = ont.resolve(term_id)
            if primary:
                return ont, primary
        if spec is None or not spec.valid_id(term_id):
            raise InvalidRequest(f"malformed term id {term_id!r}",
                                 details={"valid": [f"{s.id_pattern} (e.g. {s.example})" for s in KNOWN.values()],
                                          "flyaoc": {"term_id": term_id, "error": FLYAOC_BAD_PREFIX}})
        raise NotFound(f"term {term_id} not found in {spec.name}",
                       details={"flyaoc": {"term_id": term_id, "error": FLYAOC_NOT_FOUND}})

    # ---- hidden terms ---------------------------------------------------------------------------------------------
    def hidden(self, ontology: str, hidden: str | Iterable[str] | None, descendants: bool | str = False,
               relations: str | Iterable[str] = DEFAULT_RELATIONS) -> HiddenSet:
        ids = parse_hidden(hidden)
        if not ids:
            return HiddenSet()
        rels = relations if isinstance(relations, str) else ",".join(relations)
        return self._hidden(ontology, self.ontology(ontology), ids, _bool(descendants), rels)

    def _expand_hidden(self, name: str, ont: Ontology, ids: tuple[str, ...], descendants: bool,
                       relations: str) -> HiddenSet:
        return expand(ont, ids, descendants=descendants, relations=relations)

    @staticmethod
    def _hide_check(term_id: str, hidden: HiddenSet, requested: str) -> None:
        if term_id in hidden:
            raise NotFound(f"term {requested} is hidden in this context",
                           code="term_hidden", details={"hidden": True,
                                                        "flyaoc": {"term_id": requested, "error": FLYAOC_NOT_FOUND}})

    # ---- search ---------------------------------------------------------------------------------------------------
    def search(self, ontology: str, query: str, *, aspect: str | None = None, limit: int = 10,
               hidden: str | Iterable[str] | None = None, hidden_descendants: bool | str = False,
               include_obsolete: bool = False, mode: str | None = None,
               mf_activity_only: bool = False) -> TermSearchResponse:
        """``mode`` None: hybrid where a term encoder fits the ontology, else bm25. ``mf_activity_only``: molecular
        functions only for an activity-shaped query (search.ontology.encoder.mf), none otherwise."""
        lex = self.rerank_model(ontology)   # checks the name; a search needs no more than the model
        query = self._check_query(query)
        if mode not in (None, "bm25"):
            from search.ontology.dense_terms import check_mode

            mode = check_mode(mode)
        mode = mode or self._default_mode(ontology)
        aspect = self._check_aspect(aspect)
        if aspect and not lex.has_aspects:
            raise InvalidRequest(f"aspect: {ontology} has no GO aspects (namespaces); leave aspect out",
                                 details={"field": "aspect", "ontology": ontology})
        limit = self._check_limit(limit)
        hid = self.hidden(ontology, hidden, hidden_descendants)
        filters: dict[str, Any] = {"aspect": aspect, "exclude_ids": hid.ids, "include_obsolete": include_obsolete}
        shaped, limit_asked = None, limit
        if lex.has_aspects:
            from search.ontology.encoder.mf import activity_shaped

            shaped = activity_shaped(query)
        if mf_activity_only and shaped is False and not id_query(query):
            if aspect == "F":
                return TermSearchResponse(ontology=ontology, query=query, aspect=aspect, hidden=len(hid), mode=mode,
                                          activity_shaped=shaped, hits=[])
            limit = MAX_LIMIT   # MF hits are dropped below: ask for enough of the others
        if id_query(query):
            hits = self.engine.search_terms(ontology, query, limit=limit, **filters)
        elif mode == "bm25":
            hits = self._ranked(ontology, lex, query, limit, filters)
        else:   # an id query stays a lookup in every mode
            from search.ontology import encoder

            lexical = lambda depth: self._ranked(ontology, lex, query, depth, filters)  # noqa: E731
            if encoder.present(self.data_dir):
                from search.ontology.encoder.fusion import search as encoder_search

                hits = encoder_search(self.encoders, self.engine, ontology, query, limit, filters, mode,
                                      lexical=lexical, ontology=lambda: self.ontology(ontology),
                                      ontology_key=self._indexed(ontology))
            else:
                hits = self.dense.search(self.engine, ontology, query, limit, filters, mode, lexical=lexical,
                                         ontology=lambda: self.ontology(ontology),
                                         ontology_key=self._indexed(ontology))
        if mf_activity_only and shaped is False and not id_query(query):
            hits = [h for h in hits if h.aspect != "F"][:limit_asked]
        return TermSearchResponse(ontology=ontology, query=query, aspect=aspect, hidden=len(hid), mode=mode,
                                  activity_shaped=shaped, hits=hits)

    def rerank_model(self, ontology: str | Ontology) -> RerankModel:
        """The re-ranker's model of an indexed ontology: the one saved at indexing, or learned now from the ontology
        (once per version of its files)."""
        name = ontology.name if isinstance(ontology, Ontology) else ontology
        _, mtime = self._indexed(name)
        key: tuple[int, int | None] = (mtime, None)
        try:
            key = (mtime, self.model_path(name).stat().st_mtime_ns)
        except OSError:
            pass
        cached = self._lex.get(name)
        if cached is None or cached[0] != key:
            with self._lock:
                cached = self._lex.get(name)
                if cached is None or cached[0] != key:
                    model = self._load_model(name)
                    if model is None:   # none saved, an older format, or one that does not fit: learn it once
                        model = RerankModel.learn(self.ontology(name))
                        key = self._keep_learned(name, model, key)
                    cached = (key, model)
                    self._lex[name] = cached
        return cached[1]

    def _keep_learned(self, name: str, model: RerankModel, key: tuple[int, int | None]) -> tuple[int, int | None]:
        """Save a model learned at search time, so that the next process (a CLI call, another worker) loads it
        instead of learning it again; a read-only data dir only costs that. Returns the cache key after saving."""
        try:
            self._save_model(name, model)
            return (key[0], self.model_path(name).stat().st_mtime_ns)
        except OSError:
            return key

    def _ranked(self, ontology: str, lex: RerankModel, query: str, limit: int, filters: dict[str, Any]
                ) -> list[TermHit]:
        """Engine candidates for the query, its mention forms (:mod:`search.text.morphology`) and its best rewrites
        (one engine call, ids and scores only), re-ranked (:func:`rerank`); hits are built for the best ``limit``."""
        query = spell_greek(query)
        canon = canonical_label(query)
        ws = words(canon)
        mentions = [" ".join(v) for v in mention_forms(lex, ws)]
        if (fixed := spelled(lex, ws)) is not None:   # first: the query's other forms still have the typo
            mentions.insert(0, " ".join(fixed))
        rewrites = list(mentions)
        budget = ABBREV_ROWS_BUDGET   # names scanned for this query's abbreviations (a hostile query has hundreds)
        for abbr in dict.fromkeys(abbreviations(query)):
            if lex.rule((abbr.lower(),)):
                continue   # one a rule rewrites ("IL")
            used = lex.label_df(abbr)   # a word the labels use ("PNS") stands for the phrases names use more
            if used > ABBREV_USED_MAX:
                continue                # a word of many labels ("ATP", "CoA", "II") stands for itself
            # a word the labels use, with initials many names share ("PR1": positive regulation), stands for itself
            rows = len(lex.initial_rows(abbr)[1])
            if rows > (min(budget, ABBREV_USED_ROWS) if used else budget):
                continue
            budget -= rows
            digits = " ".join(_DIGITS.findall(abbr))
            for phrase, count in lex.expansion_counts(abbr):
                if count > used:
                    rewrites.append(regex.sub(rf"\b{regex.escape(abbr)}\b", f"{' '.join(phrase)} {digits}".strip(),
                                              canon, count=1))
        rewrites += [" ".join(r) for r in lex.rewrites(words(canon))]
        rewrites = list(dict.fromkeys(rewrites))
        first: dict[str, float] = {}   # candidate → its engine score where first found
        scores: dict[str, float] = {}
        searches = [(query, max(limit, RERANK_POOL))]
        if searched := rewrites[:ENGINE_REWRITES]:   # the best rewrites' words together: one engine pass, not one each
            searches.append((" ".join(searched), max(limit, REWRITE_POOL * len(searched))))
        for found in self.engine.term_candidates(ontology, searches, **filters):
            top = found[0][1] if found and found[0][1] > 0 else 1.0
            for cid, score in found:
                first.setdefault(cid, score)
                scores[cid] = max(scores.get(cid, 0.0), score / top)
        variants = [(canon, 1.0), *((r, MENTION_DISCOUNT if r in mentions else REWRITE_DISCOUNT) for r in rewrites)]
        if canon != query:
            variants.append((query, RAW_DISCOUNT))
        ranked = rerank(lex, variants, list(first), scores, limit)
        if ranked is None:
            ranked = [Ranked(cid, score, None) for cid, score in list(first.items())[:limit]]
        # the engine explains only hits the model does not know (the label the re-ranker matched says it otherwise)
        tokens = {t for v in query_variants(query) for t in v} if any(r.label is None for r in ranked) else set()
        built = {h.id: h for h in self.engine.term_hits(ontology, [r.id for r in ranked], tokens)}
        out = []
        for r in ranked:
            if (h := built.get(r.id)) is not None:
                update: dict[str, Any] = {"score": round(r.score, 4)}
                if r.label is not None:
                    update["matched_synonym"] = lex.synonym(lex.index[r.id], r.label - 1) if r.label else None
                out.append(h.model_copy(update=update))
        return out

    @staticmethod
    def _check_query(query: str) -> str:
        query = (query or "").strip()
        if not query:
            raise InvalidRequest("query: empty query", details={"field": "query"})
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidRequest(f"query: longer than {MAX_QUERY_CHARS} characters", details={"field": "query"})
        return query

    @staticmethod
    def _check_aspect(aspect: str | None) -> str | None:
        if aspect is None or aspect == "":
            return None
        a = aspect.strip().upper()
        a = GO_ASPECTS.get(aspect.strip().lower(), a)
        if a not in ASPECTS:
            raise InvalidRequest(f"aspect: {aspect!r} is not a GO aspect",
                                 details={"field": "aspect", "valid": list(ASPECTS) + sorted(GO_ASPECTS)})
        return a

    @staticmethod
    def _check_limit(limit: int) -> int:
        if not 1 <= int(limit) <= MAX_LIMIT:
            raise InvalidRequest(f"limit: must be between 1 and {MAX_LIMIT}", details={"field": "limit"})
        return int(limit)

    def _relations(self, ont: Ontology, relations: str | Iterable[str] | None) -> list[str]:
        rels = ont.expand_relations(relations)
        hierarchy = RELATION_SETS["hierarchy"] or ()
        unknown = [r for r in rels if r not in ont.relations and r not in hierarchy]
        if unknown:
            raise InvalidRequest(f"relations: unknown {unknown}",
                                 details={"field": "relations", "valid": sorted(RELATION_SETS) + ont.relations})
        return rels

    # ---- lookups --------------------------------------------------------------------------------------------------
    def lookup(self, term_id: str, *, hidden: str | Iterable[str] | None = None,
               hidden_descendants: bool | str = False) -> TermLookup:
        """A term by primary or alt id; alt ids resolve with a note, obsolete terms list their replacements."""
        ont, primary = self._locate(term_id)
        hid = self.hidden(ont.name, hidden, hidden_descendants)
        self._hide_check(primary, hid, term_id)
        term = ont.get(primary)
        assert term is not None
        notes = []
        if primary != term_id.strip():
            notes.append(f"{term_id.strip()} is an alternative id of {primary} ({term.name}).")
        replacements = [self._ref(ont, r) for r in dict.fromkeys(term.replaced_by + term.consider) if r not in hid]
        if term.obsolete:
            notes.append(f"{primary} is obsolete" + (
                f"; replaced by {', '.join(term.replaced_by)}" if term.replaced_by else "") + (
                f"; consider {', '.join(term.consider)}" if term.consider else "") + ".")
        return TermLookup(requested_id=term_id.strip(), id=primary, note=" ".join(notes) or None, term=term,
                          replacements=replacements, children_count=len(self._visible_children(ont, primary, hid)))

    @staticmethod
    def _ref(ont: Ontology, term_id: str) -> TermRef:
        primary = ont.resolve(term_id) or term_id
        return TermRef(id=primary, name=ont.name_of(primary), obsolete=ont.is_obsolete(primary))

    @staticmethod
    def _visible_children(ont: Ontology, term_id: str, hid: HiddenSet, relations: Iterable[str] = (IS_A,)
                          ) -> list[str]:
        return [c for c in ont.children(term_id, relations) if c not in hid]

    def related(self, term_id: str, direction: Literal["ancestors", "descendants", "children", "parents"], *,
                relations: str | Iterable[str] | None = "hierarchy", limit: int = 1000,
                hidden: str | Iterable[str] | None = None, hidden_descendants: bool | str = False) -> TermList:
        """Ancestors, descendants, direct children or direct parents over ``relations``, hidden ones left out."""
        ont, primary = self._locate(term_id)
        hid = self.hidden(ont.name, hidden, hidden_descendants)
        self._hide_check(primary, hid, term_id)
        rels = self._relations(ont, relations)
        ids = [i for i in getattr(ont, direction)(primary, rels) if i not in hid]
        if not 1 <= limit <= 100_000:
            raise InvalidRequest("limit: must be between 1 and 100000", details={"field": "limit"})
        return TermList(id=primary, relations=rels, total=len(ids), truncated=len(ids) > limit,
                        terms=[self._ref(ont, i) for i in ids[:limit]])

    # ---- FlyAOC-shaped tools (spec §2.3, §2.4) ---------------------------------------------------------------------
    def flyaoc_record(self, ont: Ontology, term_id: str, hid: HiddenSet, full: bool = True) -> dict[str, Any]:
        """``{go_id|fbbt_id|fbdv_id, name, namespace (GO), definition, synonyms?, parents?, children_count?}``."""
        term = ont.get(term_id)
        assert term is not None
        key = KNOWN[ont.name].id_field if ont.name in KNOWN else "id"
        rec: dict[str, Any] = {key: term.id, "name": term.name}
        children = len(self._visible_children(ont, term.id, hid))
        if full:
            if ont.name == "go":
                rec["namespace"] = term.namespace
            rec["definition"] = term.definition
            if term.synonyms:
                rec["synonyms"] = [s.text for s in term.synonyms[:5]]
            parents = [p for p in ont.parents(term.id, (IS_A,)) if p not in hid][:2]
            if parents:
                rec["parents"] = [f"{p} ({ont.name_of(p)})" for p in parents]
        if children:
            rec["children_count"] = children
        return rec

    def flyaoc_search(self, ontology: str, query: str, *, aspect: str | None = None, limit: int = 10,
                      hidden: str | Iterable[str] | None = None, hidden_descendants: bool | str = False
                      ) -> list[dict[str, Any]]:
        """``search_go_terms`` / ``search_anatomy_terms`` / ``search_stage_terms`` records."""
        res = self.search(ontology, query, aspect=aspect, limit=limit, hidden=hidden,
                          hidden_descendants=hidden_descendants)
        ont = self.ontology(ontology)
        hid = self.hidden(ont.name, hidden, hidden_descendants)
        return [self.flyaoc_record(ont, h.id, hid) for h in res.hits]

    def flyaoc_children(self, term_id: str, *, limit: int = 20, relations: str | Iterable[str] = IS_A,
                        hidden: str | Iterable[str] | None = None, hidden_descendants: bool | str = False
                        ) -> dict[str, Any]:
        """``get_term_children``: ``{term_id, term_name, children_count, children, truncated}``."""
        ont, primary = self._locate(term_id)
        hid = self.hidden(ont.name, hidden, hidden_descendants)
        self._hide_check(primary, hid, term_id)
        kids = self._visible_children(ont, primary, hid, self._relations(ont, relations))
        limit = self._check_limit(limit)
        return {"term_id": term_id.strip(), "term_name": ont.name_of(primary), "children_count": len(kids),
                "children": [self.flyaoc_record(ont, c, hid, full=False) for c in kids[:limit]],
                "truncated": len(kids) > limit}

    # ---- description → term --------------------------------------------------------------------------------------
    def resolve_description(self, text: str, ontology: str = "go", *, aspect: str | None = None, limit: int = 5,
                            hidden: str | Iterable[str] | None = None, hidden_descendants: bool | str = False
                            ) -> TermResolveResponse:
        """Rank visible terms for a natural-language description (e.g. an agent's proposed term name): the
        search ranking, reported with the label (name or synonym) each candidate matched best."""
        res = self.search(ontology, text, aspect=aspect, limit=limit, hidden=hidden,
                          hidden_descendants=hidden_descendants)
        return TermResolveResponse(
            ontology=res.ontology, text=res.query, aspect=res.aspect, hidden=res.hidden,
            results=[ResolvedTerm(id=h.id, name=h.name, aspect=h.aspect, matched=h.matched_synonym or h.name,
                                  score=h.score) for h in res.hits])


# ---- ranking ---------------------------------------------------------------------------------------------------------
#
# Engines find candidates with BM25; the service re-ranks them the same way for every engine, with what it learns
# from the ontology as served (so a benchmark that holds synonyms out of the index also holds them out of here):
#
# * IDF weights of word-view stems over the terms' labels (names and synonyms);
# * rewrite rules learned from the ontology's own name/synonym pairs: where a synonym and its term's name differ in
#   one stretch of words ("IL-21 production" / "interleukin-21 production", "T lymphocyte" / "T cell", "formation" /
#   "biosynthetic process", "localisation in" / "localization to"), that stretch is a rule, counted;
# * for each candidate, the best label (name or synonym) against the query or one of its rewrites by IDF-weighted
#   Dice over stems, with a penalty when the regulation frame differs, plus how much of the query its definition
#   covers and the engine's own (normalised) score.

#: engine candidates for the query as given, and for each rewrite searched
RERANK_POOL = 60
REWRITE_POOL = 20
#: the best rewrites, searched together in one engine search (their words in one query: on the dev sample this kept
#: top-1/top-5 within 0.001 of a search per rewrite, for a quarter less engine time); the re-ranker compares
#: candidates against more of them
ENGINE_REWRITES = 2
#: rewrites the re-ranker compares candidates' labels against
MAX_REWRITES = 6
#: a rule must have been seen this often, and be this share of its left side's uses
RULE_MIN_COUNT = 2
RULE_MIN_SHARE = 0.15
#: words in more than this share of terms' labels (and at least RULE_STOP_MIN: "of", "to", "cell") are not a
#: rule's whole left side
RULE_STOP_DF = 0.04
RULE_STOP_MIN = 20
#: the longest synonym (in words) that rewrites to its term's name inside a query
PHRASE_MAX = 6
#: score = label similarity × discounts + W_DEF · definition coverage + W_ENGINE · engine score / top engine score
W_DEF = 0.05
W_ENGINE = 0.05
REWRITE_DISCOUNT = 0.95
#: the query's mention forms (lemmas, process nouns, joined split words: :func:`mention_forms`); these and the query
#: itself (discount >= MENTION_DISCOUNT) may earn the exact-label bonus, rule rewrites may not
MENTION_DISCOUNT = 0.97
#: the query as given, when GO's naming conventions rewrote it ("activation of X" is "positive regulation of X")
RAW_DISCOUNT = 0.85
#: a synonym's similarity counts this share of a name's, by scope (EXACT > NARROW/BROAD > RELATED)
SYNONYM_DISCOUNT = {"EXACT": 0.95, "NARROW": 0.92, "BROAD": 0.92, "RELATED": 0.9}
FRAME_PENALTY = 0.4
#: a query form whose stems are exactly a label's: the name or an exact synonym of a live term ranks first, then
#: narrow/broad, then related synonyms (× the form's discount: the query as written before its mention forms)
EXACT_BONUS = {"": 0.3, "EXACT": 0.27, "NARROW": 0.21, "BROAD": 0.21, "RELATED": 0.18}
#: a one-word query (a bare modifier, "mitotic") prefers the most general of the terms whose label holds it:
#: + W_GENERAL × log(1 + descendants) / log(1 + terms)
W_GENERAL = 0.1

#: Greek letters as GO and FBbt spell them in names
GREEK = {"α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "ε": "epsilon", "ζ": "zeta", "η": "eta",
         "θ": "theta", "ι": "iota", "κ": "kappa", "λ": "lambda", "μ": "mu", "ν": "nu", "ξ": "xi", "ο": "omicron",
         "π": "pi", "ρ": "rho", "σ": "sigma", "τ": "tau", "υ": "upsilon", "φ": "phi", "χ": "chi", "ψ": "psi",
         "ω": "omega"}
_word_re = regex.compile(analysis.WORD_PATTERN)
_TOKEN = regex.compile(r"[\p{L}\p{N}]+")
_ABBREV_SHAPE = regex.compile(r"\p{Lu}.*\p{Lu}|\p{Ll}\p{Lu}")
_DIGITS = regex.compile(r"\p{N}+")
_ABBREV_PART = regex.compile(r"\p{Lu}\p{Ll}*|\p{Ll}+|\p{N}+")
#: abbreviations of 2 to ABBREV_MAX letters are expanded, into at most ABBREV_EXPANSIONS name phrases each
ABBREV_MAX = 4
ABBREV_EXPANSIONS = 3
#: an abbreviation that more terms' labels use as a word than this is not expanded (and its expansions, phrases
#: the names would have to use even more often, are not looked for)
ABBREV_USED_MAX = 50
#: nor one whose initials more names than this share ("PR1": positive regulation, 4,072 GO names)
ABBREV_USED_ROWS = 500
#: names scanned for one query's abbreviations, all together (GO's commonest initials, "pr", start 4,072 names:
#: ~60 ms; beyond the budget an abbreviation is left as written)
ABBREV_ROWS_BUDGET = 2_000
#: stems that make the regulation frame of a GO label: "regulation of X" ≠ "positive regulation of X" ≠ X
FRAME = ("regul", "posit", "negat")


_GREEK_RE = regex.compile(r"(\p{L}?)([" + "".join(GREEK) + r"])(?=(\p{L}?))")


def spell_greek(text: str) -> str:
    """Greek letters spelled as GO and FBbt write them: inside a word joined ("IκB" → "IkappaB"), after a word
    apart ("TGFβ" → "TGF beta", "PDGFRβ" → "PDGFR beta"), else in place ("β-catenin" → "beta-catenin")."""
    if text.isascii():
        return text

    def one(m: regex.Match[str]) -> str:
        before, letter, after = m.group(1), GREEK[m.group(2)], m.group(3)
        return before + letter if (not before or after) else f"{before} {letter}"
    return _GREEK_RE.sub(one, text.replace("Κ", "κ"))


def mention_forms(lex: RerankModel, ws: list[str]) -> list[list[str]]:
    """The query's words as the ontology writes them: each word's lemma or process noun from the morphology learned
    at indexing ("nuclei" → nucleus, "secretory" → secretion), and two words joined where the ontology uses the
    joined word ("hind gut" → hindgut). In a query of several words, only words the ontology's labels do not use
    are replaced ("nuclear membrane" stays; "acetylated histones" → acetylation histone)."""
    out = lex.morph.variants(ws if len(ws) == 1 else [w if stem(w) not in lex.idf else "" for w in ws])
    out = [[a or w for a, w in zip(v, ws, strict=True)] for v in out]
    for j in range(len(ws) - 1):
        joined = ws[j] + ws[j + 1]
        if joined.isalpha() and stem(joined) in lex.idf:
            out.append(ws[:j] + [joined] + ws[j + 2:])
    return out


def spelled(lex: RerankModel, ws: list[str]) -> list[str] | None:
    """The words with each misspelt one corrected (:mod:`search.text.spelling`): a word of letters that no label
    uses and the morphology does not know; None when none is corrected."""
    out, changed = list(ws), False
    for j, w in enumerate(ws):
        if max_edits(w) and stem(w) not in lex.idf and not lex.morph.alternatives(w):
            if (c := lex.speller.correct(w)) is not None:
                out[j], changed = c, True
    return out if changed else None


def words(text: str) -> list[str]:
    """Lower-cased word-view words (unstemmed), Greek letters spelled out."""
    out = _word_re.findall(text.lower())
    return out if text.isascii() else [GREEK.get(w, w) for w in out]


_STEMS: dict[str, str] = {}


def stems(ws: Iterable[str]) -> frozenset[str]:
    """Word-view stems of the words (a plain dict in front of the analyser: the re-ranker stems millions)."""
    return frozenset(_stem_list(ws))


def _stem_list(ws: Iterable[str]) -> list[str]:
    """The words' non-empty stems in order (a frozenset made from them in this order iterates alike)."""
    out = []
    for w in ws:
        t = _STEMS.get(w)
        if t is None:
            t = stem(w)
            if len(_STEMS) < 1_000_000:
                _STEMS[w] = t
        if t:
            out.append(t)
    return out


def _conventional_words(text: str, ws: list[str]) -> list[str]:
    """``words(canonical_label(text))``, given ``ws = words(text)``."""
    canon = canonical_label(text)
    return ws if canon is text else words(canon)   # the same object: no convention in the text


#: words an abbreviation may skip ("AMMC" is the antennal mechanosensory and motor center)
ABBREV_SKIP = frozenset({"and", "of", "the", "to", "in", "for", "on", "by", "with"})


def _word_positions(ws: list[str]) -> list[list[int]]:
    """The word positions an abbreviation's letters may stand for: every word, and (when it has some) every word
    but the function words of ``ABBREV_SKIP``."""
    content = [j for j, w in enumerate(ws) if w not in ABBREV_SKIP]   # name words are lower-case
    every = list(range(len(ws)))
    return [every, content] if len(content) < len(ws) else [every]


def _initial_sequences(ws: list[str]) -> list[list[str]]:
    return [[ws[j] for j in at] for at in _word_positions(ws)]


def _subsequence(part: str, word: str) -> bool:
    """``part`` starts ``word`` and its other letters appear in it in order."""
    if not word.startswith(part[0]):
        return False
    it = iter(word[1:])
    return all(c in it for c in part[1:])


def abbreviations(text: str) -> list[str]:
    """Tokens of ``text`` shaped like abbreviations: two or more capitals, or a capital after a lower-case letter
    ("CNS", "vDR", "APhN", "dorEpiP2")."""
    return [t for t in _TOKEN.findall(text) if len(t) <= 12 and _ABBREV_SHAPE.search(t)]


#: a label's regulation frame, by its stems (labels recur search after search; bounded like ``_STEMS``)
_FRAMES: dict[frozenset[str], tuple[bool, ...]] = {}


def _frame(tokens: frozenset[str]) -> tuple[bool, ...]:
    return tuple(f in tokens for f in FRAME)


def _segment_diff(a: list[str], b: list[str]) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """Where and in which stretches word lists ``a`` and ``b`` differ, after their common (stem-equal) head and
    tail."""
    sa, sb = [stem(w) for w in a], [stem(w) for w in b]
    n = min(len(a), len(b))
    p = 0
    while p < n and sa[p] == sb[p]:
        p += 1
    q = 0
    while q < n - p and sa[-1 - q] == sb[-1 - q]:
        q += 1
    return p, tuple(a[p:len(a) - q]), tuple(b[p:len(b) - q])


_SPACES = operator.methodcaller("count", " ")


def _map_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an uncompressed ``.npz`` as read-only views of one memory map of the file.

    ``np.load`` copies every member through zipfile's reader and checks its CRC (~35 ms for GO's 28 MB model, most of
    a ``flysift terms`` call's load); mapped, pages are read as the arrays are touched. Only plain numeric and byte
    dtypes are accepted (nothing is unpickled), and every member must lie inside the file: ``ValueError`` otherwise."""
    with open(path, "rb") as fh, zipfile.ZipFile(fh) as zf:
        infos = zf.infolist()
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    out: dict[str, np.ndarray] = {}
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
            raise ValueError(f"member {info.filename[:40]!r}: not a stored .npy")
        at = info.header_offset
        if mm[at:at + 4] != b"PK\x03\x04":
            raise ValueError("bad local header")
        name_len, extra_len = struct.unpack("<HH", mm[at + 26:at + 30])
        start = at + 30 + name_len + extra_len
        end = start + info.file_size
        if end > len(mm):
            raise ValueError("member past the end of the file")
        header = io.BytesIO(mm[start:min(end, start + 65536)])
        try:   # numpy parses the header with a literal evaluator: a planted one fails in several ways
            version = np.lib.format.read_magic(header)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                           (2, 0): np.lib.format.read_array_header_2_0}[version]
            shape, fortran, dtype = read_header(header)
        except Exception as e:
            raise ValueError(f"member {info.filename[:40]!r}: bad .npy header ({type(e).__name__})") from None
        if dtype.hasobject or dtype.kind not in "iuf" or fortran or len(shape) != 1:
            raise ValueError(f"member {info.filename[:40]!r}: dtype {dtype.str} shape {shape}")
        data = start + header.tell()
        if data + shape[0] * dtype.itemsize > end:
            raise ValueError(f"member {info.filename[:40]!r}: shorter than its header says")
        out[info.filename[:-4]] = np.frombuffer(mm, dtype=dtype, count=shape[0], offset=data)
    return out


def _positions_of(key: str) -> cached_property[dict[str, int]]:
    """A model attribute: string → position in the meta list ``key``, made on first use."""
    def positions(self: RerankModel) -> dict[str, int]:
        return dict(zip(self.meta[key], range(len(self.meta[key])), strict=True))
    return cached_property(positions)


def _starts_of(column: str) -> cached_property[list[int]]:
    """A model attribute: where each value of the sizes ``column`` starts (one cumulative sum, made on first use)."""
    def starts(self: RerankModel) -> list[int]:
        return np.concatenate(([0], np.cumsum(self.arrays[column], dtype=np.int64))).tolist()
    return cached_property(starts)


class RerankModel:
    """What the re-ranker learns from one ontology: label stems, IDF weights, rewrite rules, and per term what ranks it
    (definition stems, generality, synonym scopes and texts).

    It is held as flat columns (:attr:`arrays`, numpy, and :attr:`meta`, plain lists and dicts), the same whether
    learned (:meth:`learn`) or read back (:meth:`load`: milliseconds, where learning GO takes a minute), so a search
    needs neither the ontology nor its OBO file. A term's labels, definition and name words are made from the columns
    the first time it is a candidate (most terms never are)."""

    #: the layout of :meth:`save`; a saved model of another format is learned again
    FORMAT = 6   # 6: abbreviation initials also skip function words ("AMMC")
    #: scope codes of the ``scopes`` column (0: the name)
    SCOPES = ("", "EXACT", "NARROW", "BROAD", "RELATED")
    #: array → dtype kind and what its length is (a key of :meth:`_lengths`); ``load`` checks both
    ARRAYS: dict[str, tuple[str, str]] = {
        "labels": ("i", "terms"), "sizes": ("i", "labels"), "stems": ("i", "stems"), "weights": ("f", "labels"),
        "scopes": ("i", "labels"), "name_words": ("i", "terms"), "words": ("i", "words"), "rule_sizes": ("i", "rules"),
        "rhs_counts": ("i", "rhs"), "initial_sizes": ("i", "initials"), "initial_rows": ("i", "initial_rows"),
        "def_sizes": ("i", "terms"), "def_stems": ("i", "def_stems"), "generality": ("f", "terms"),
        "syn_text": ("u", "syn_bytes"), "syn_ends": ("i", "synonyms"),
    }

    def __init__(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]):
        """From columns :meth:`learn` made or :meth:`load` checked."""
        self.meta, self.arrays = meta, arrays
        self.ids: list[str] = meta["ids"]
        self.vocab: list[str] = meta["vocab"]
        self.idf: dict[str, float] = meta["idf"]
        self.unknown_idf = float(meta["unknown_idf"])
        self.has_aspects = bool(meta["has_aspects"])
        self.morph = Morphology.from_state(meta["morphology"])
        # the lookup tables below are made on first use: a ``flysift terms`` call loads the model for one query, and
        # building all of them took ~50 ms of its time (abbreviations and definitions are rarely needed)

        self._terms: dict[int, list[tuple[frozenset[str], float, str, tuple[bool, ...]]]] = {}
        self._def_stems: dict[int, frozenset[str]] = {}

    @cached_property
    def index(self) -> dict[str, int]:
        """Term id → row."""
        return dict(zip(self.ids, range(len(self.ids)), strict=True))

    _rule_at = _positions_of("rules")
    _initial_at = _positions_of("initials")

    @cached_property
    def speller(self) -> Speller:
        """Corrections of misspelt query words among the terms' name words, commoner stems first (made on the first
        query with a word no label uses)."""
        return Speller((self.vocab[c] for c in set(self.arrays["words"].tolist())),
                       lambda w: -self.idf.get(stem(w), self.unknown_idf))

    @cached_property
    def max_lhs(self) -> int:
        """The most words a rule's left side has."""
        return max(map(_SPACES, self.meta["rules"]), default=-1) + 1

    # where each term's, label's, rule's and initial's values start
    _label_at = _starts_of("labels")
    _stem_at = _starts_of("sizes")
    _word_at = _starts_of("name_words")
    _def_at = _starts_of("def_sizes")
    _rhs_at = _starts_of("rule_sizes")
    _row_at = _starts_of("initial_sizes")

    @cached_property
    def _syn_at(self) -> list[int]:
        return [0, *self.arrays["syn_ends"].tolist()]

    @cached_property
    def _generality(self) -> list[float]:
        return self.arrays["generality"].tolist()

    # ---- learning -------------------------------------------------------------------------------------------------
    @classmethod
    def learn(cls, ont: Ontology) -> RerankModel:
        """Learn the model from the ontology's columns (building Term models for every term would take longer)."""
        d = ont.columns
        labels_of: list[list[frozenset[str]]] = []
        df: Counter[str] = Counter()
        pairs: Counter[tuple[tuple[str, ...], tuple[str, ...]]] = Counter()
        raw: list[tuple[list[str], list[list[str]]]] = []   # label words before GO's conventions
        for i, name in enumerate(d["names"]):
            name_raw = words(name)
            nw = _conventional_words(name, name_raw)
            labels = [stems(nw)]
            syns_raw = []
            for text, _scope in d["synonyms"][i]:
                sw_raw = words(text)
                syns_raw.append(sw_raw)
                sw = _conventional_words(text, sw_raw)
                labels.append(stems(sw))
                p, lhs, rhs = _segment_diff(sw, nw)
                if 1 <= len(lhs) <= 3 and 1 <= len(rhs) <= 4:
                    pairs[lhs, rhs] += 1
                    if p:   # with the word before, for rules whose left side alone is too common ("to")
                        pairs[(sw[p - 1], *lhs), (sw[p - 1], *rhs)] += 1
            raw.append((name_raw, syns_raw))
            labels_of.append(labels)
            df.update(frozenset().union(*labels))
        n = max(1, len(d["names"]))
        idf = {t: math.log(1 + n / c) for t, c in df.items()}
        unknown_idf = math.log(1 + n)
        uses: Counter[tuple[str, ...]] = Counter()
        for (lhs, _), c in pairs.items():
            uses[lhs] += c
        stop = {t for t, c in df.items() if c > max(RULE_STOP_DF * n, RULE_STOP_MIN)}
        rules: dict[tuple[str, ...], list[tuple[tuple[str, ...], int]]] = {}
        for (lhs, rhs), c in sorted(pairs.items(), key=lambda kv: -kv[1]):
            if c >= RULE_MIN_COUNT and c >= RULE_MIN_SHARE * uses[lhs] and not stems(lhs) <= stop | {""}:
                rules.setdefault(lhs, []).append((rhs, c))
        # every multi-word synonym, and every synonym of one rare word, names its term inside longer labels:
        # "Rad50 complex assembly" is "Mre11 complex assembly" because "Rad50 complex" is a synonym of "Mre11 complex"
        rare = RULE_STOP_DF * n / 10
        for nw, syns_raw in raw:
            for phrase in map(tuple, syns_raw):
                if 1 <= len(phrase) <= PHRASE_MAX and (len(phrase) > 1 or df.get(stem(phrase[0]), 0) <= rare) and \
                        stems(phrase) != stems(nw):
                    known = rules.setdefault(phrase, [])
                    if len(known) < 2 and all(r != tuple(nw) for r, _ in known):
                        known.append((tuple(nw), 0))   # count 0: a synonym phrase, not a learned rule
        morph = Morphology.learn(w for nw, syns_raw in raw for ws in (nw, *syns_raw) for w in ws)
        # initials of 2–4 consecutive name words, for abbreviations ("vDR" → "ventral double row")
        names_words = [words(name) for name in d["names"]]
        initials: dict[str, list[int]] = {}
        for i, nw in enumerate(names_words):
            for seq in _initial_sequences(nw):
                letters = [w[0] if w[0].isalpha() else "" for w in seq]
                for j in range(len(seq)):
                    for k in range(2, ABBREV_MAX + 1):
                        window = letters[j:j + k]
                        if len(window) == k and all(window):
                            rows = initials.setdefault("".join(window), [])
                            if not rows or rows[-1] != i:
                                rows.append(i)
        # label stems, name words and definition stems as numbers into one vocabulary (they load as shared strings)
        vocab: dict[str, int] = {}
        code = lambda w: vocab.setdefault(w, len(vocab))  # noqa: E731
        label_codes = [[code(t) for t in sorted(lab)] for labs in labels_of for lab in labs]
        weights = [sum(idf.get(t, unknown_idf) for t in lab) for labs in labels_of for lab in labs]
        def_codes = [[code(t) for t in dict.fromkeys(_stem_list(words(text or "")))] for text in d["defs"]]
        syn_text = "".join(text + "\x00" for syns in d["synonyms"] for text, _ in syns).encode()
        syn_lens = [len(text.encode()) + 1 for syns in d["synonyms"] for text, _ in syns]
        scope_code = {s: k for k, s in enumerate(cls.SCOPES)}
        keys = list(rules)
        ints = lambda xs: np.asarray(xs, dtype=np.int32)  # noqa: E731
        arrays: dict[str, np.ndarray] = {
            "labels": ints([len(labs) for labs in labels_of]), "sizes": ints([len(c) for c in label_codes]),
            "stems": ints([t for c in label_codes for t in c]), "weights": np.asarray(weights, dtype=np.float64),
            "scopes": np.asarray([0 if k == 0 else scope_code.get(syns[k - 1][1], len(cls.SCOPES) - 1)
                                  for syns, labs in zip(d["synonyms"], labels_of, strict=True)
                                  for k in range(len(labs))], dtype=np.int8),
            "name_words": ints([len(ws) for ws in names_words]),
            "words": ints([code(w) for ws in names_words for w in ws]),
            "rule_sizes": ints([len(rules[k]) for k in keys]),
            "rhs_counts": np.asarray([c for k in keys for _, c in rules[k]], dtype=np.int64),
            "initial_sizes": ints([len(v) for v in initials.values()]),
            "initial_rows": ints([i for v in initials.values() for i in v]),
            "def_sizes": ints([len(c) for c in def_codes]), "def_stems": ints([t for c in def_codes for t in c]),
            "generality": np.asarray([math.log1p(len(ont.descendants(t, "hierarchy"))) / math.log1p(max(1, len(ont)))
                                      for t in ont.ids], dtype=np.float64),
            "syn_text": np.frombuffer(syn_text, dtype=np.uint8),
            "syn_ends": np.cumsum(np.asarray(syn_lens, dtype=np.int64), dtype=np.int64),
        }
        meta = {"format": cls.FORMAT, "terms": len(ont), "ids": list(ont.ids), "has_aspects": ont.has_aspects,
                "vocab": list(vocab), "idf": idf, "unknown_idf": unknown_idf, "rules": [" ".join(k) for k in keys],
                "rhs": [" ".join(r) for k in keys for r, _ in rules[k]], "initials": list(initials),
                "morphology": morph.state()}
        return cls(meta, arrays)

    # ---- the saved form -------------------------------------------------------------------------------------------
    #: string lists saved as newline-terminated UTF-8 columns instead of inside the JSON ``meta``: parsing them as
    #: JSON was ~40 ms of every ``flysift terms`` call; a split is a few (meta key, key inside it or "") → column
    TEXT_COLUMNS: dict[str, tuple[str, str]] = {
        "text_ids": ("ids", ""), "text_vocab": ("vocab", ""), "text_rules": ("rules", ""), "text_rhs": ("rhs", ""),
        "text_initials": ("initials", ""), "text_morph_forms": ("morphology", "forms"),
        "text_morph_words": ("morphology", "words"),
    }

    def save(self, path: Path) -> None:
        """One uncompressed ``.npz`` (numbers and UTF-8 bytes only: it loads with ``allow_pickle=False``): the string
        lists as text columns, the rest of the lists and dicts as a JSON document in its ``meta`` array; written
        atomically."""
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = dict(self.meta)
        texts: dict[str, np.ndarray] = {}
        for column, (key, sub) in self.TEXT_COLUMNS.items():
            holder = meta if not sub else dict(meta[key])
            items = holder[sub or key]
            if isinstance(items, list) and all(isinstance(t, str) and "\n" not in t for t in items):   # else JSON
                texts[column] = np.frombuffer("".join(t + "\n" for t in items).encode(), np.uint8)
                holder[sub or key] = None
            if sub:
                meta[key] = holder
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            raw = np.frombuffer(json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode(), np.uint8)
            savez: Any = np.savez   # numpy's stub reads **arrays as its keyword options
            with os.fdopen(fd, "wb") as fh:
                savez(fh, meta=raw, **texts, **self.arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: Path) -> RerankModel:
        """What :meth:`save` wrote; ``ValueError`` for anything else. Every column's type and length and every index
        are checked, so a planted file can at worst mis-rank, never fail a search or run code."""
        try:
            got = _map_npz(path)
            meta = json.loads(got.pop("meta").tobytes())
            if isinstance(meta, dict) and meta.get("format") == cls.FORMAT:
                for column, (key, sub) in cls.TEXT_COLUMNS.items():
                    if column in got:
                        a = got.pop(column)
                        if a.dtype != np.uint8 or a.ndim != 1:
                            raise ValueError(column)
                        holder = meta[key] if sub else meta
                        if not isinstance(holder, dict) or holder.get(sub or key, 0) is not None:
                            raise ValueError(column)
                        holder[sub or key] = a.tobytes().decode().split("\n")[:-1]
        except (OSError, EOFError, KeyError, ValueError, RecursionError, zipfile.BadZipFile, struct.error) as e:
            raise ValueError(f"{path.name}: not a re-ranker model ({type(e).__name__})") from None
        if not isinstance(meta, dict) or meta.get("format") != cls.FORMAT:
            raise ValueError(f"{path.name}: not a re-ranker model of format {cls.FORMAT}")
        try:
            cls._check(meta, got)
            return cls(meta, got)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise ValueError(f"{path.name}: malformed re-ranker model ({type(e).__name__}: {str(e)[:100]})") from None

    @classmethod
    def _check(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        lists = ("ids", "vocab", "rules", "rhs", "initials")
        if not all(isinstance(meta[k], list) and set(map(type, meta[k])) <= {str} for k in lists) or \
                not isinstance(meta["idf"], dict) or set(arrays) != set(cls.ARRAYS) or \
                not set(map(type, meta["idf"].values())) <= {float} or \
                not isinstance(meta["unknown_idf"], float) or len(meta["ids"]) != meta["terms"]:
            raise ValueError("columns of the wrong type")
        for k, (kind, _) in cls.ARRAYS.items():
            a = arrays[k]
            if a.ndim != 1 or a.dtype.kind != kind or (kind == "i" and a.size and a.min() < 0):
                raise ValueError(f"column {k}")
        total = lambda k: int(arrays[k].sum(dtype=np.int64))  # noqa: E731
        lengths = {"terms": meta["terms"], "labels": total("labels"), "stems": total("sizes"),
                   "words": total("name_words"), "rules": len(meta["rules"]), "rhs": len(meta["rhs"]),
                   "initials": len(meta["initials"]), "initial_rows": total("initial_sizes"),
                   "def_stems": total("def_sizes"), "synonyms": total("labels") - meta["terms"],
                   "syn_bytes": int(arrays["syn_ends"][-1]) if arrays["syn_ends"].size else 0}
        if any(arrays[k].size != lengths[n] for k, (_, n) in cls.ARRAYS.items()) or \
                total("rule_sizes") != len(meta["rhs"]) or arrays["labels"].min(initial=1) < 1:
            raise ValueError("column lengths do not add up")
        bounds = {"stems": len(meta["vocab"]), "words": len(meta["vocab"]), "def_stems": len(meta["vocab"]),
                  "initial_rows": meta["terms"], "scopes": len(cls.SCOPES)}
        if any(arrays[k].size and arrays[k].max() >= n for k, n in bounds.items()) or \
                np.any(np.diff(arrays["syn_ends"]) < 1):
            raise ValueError("an index out of range")

    @cached_property
    def columns(self) -> _Columns:
        """The columns :func:`rerank` scores with, as numpy arrays (made on the first search, in milliseconds)."""
        return _Columns(self)

    # ---- per term, made when first needed --------------------------------------------------------------------------
    def term(self, i: int) -> list[tuple[frozenset[str], float, str, tuple[bool, ...]]]:
        """Term ``i``'s labels (the name, then its synonyms): stems, IDF weight, scope ("" for the name), frame."""
        got = self._terms.get(i)
        if got is None:
            a, vocab, at = self.arrays, self.vocab, self._stem_at
            first, end = self._label_at[i], self._label_at[i + 1]
            codes = a["stems"][at[first]:at[end]].tolist()   # one slice per term: numpy slicing is slow per label
            got = []
            for k, weight, scope in zip(range(first, end), a["weights"][first:end].tolist(),
                                        a["scopes"][first:end].tolist(), strict=True):
                lab = frozenset([vocab[t] for t in codes[at[k] - at[first]:at[k + 1] - at[first]]])
                got.append((lab, weight, self.SCOPES[scope], _frame(lab)))
            self._terms[i] = got
        return got

    def synonym(self, i: int, k: int) -> str:
        """The text of term ``i``'s ``k``-th synonym (0-based)."""
        n = self._label_at[i] - i + k   # each term has one name label before its synonyms
        return self.arrays["syn_text"][self._syn_at[n]:self._syn_at[n + 1] - 1].tobytes().decode()

    def definition(self, i: int) -> frozenset[str]:
        """Stems of term ``i``'s definition."""
        got = self._def_stems.get(i)
        if got is None:
            codes = self.arrays["def_stems"][self._def_at[i]:self._def_at[i + 1]].tolist()
            got = self._def_stems[i] = frozenset([self.vocab[t] for t in codes])
        return got

    def generality(self, i: int) -> float:
        """How general term ``i`` is: log(1 + its descendants over the hierarchy) / log(1 + terms)."""
        return self._generality[i] if 0 <= i < len(self._generality) else 0.0

    def name_words(self, i: int) -> list[str]:
        return [self.vocab[t] for t in self.arrays["words"][self._word_at[i]:self._word_at[i + 1]].tolist()]

    # ---- query side -----------------------------------------------------------------------------------------------
    def rule(self, lhs: tuple[str, ...] | list[str]) -> list[tuple[tuple[str, ...], int]]:
        """The right sides a left side rewrites to, most frequent first (count 0: a synonym phrase)."""
        n = self._rule_at.get(" ".join(lhs))
        if n is None:
            return []
        rhs, counts = self.meta["rhs"], self.arrays["rhs_counts"]
        return [(tuple(rhs[j].split(" ")) if rhs[j] else (), int(counts[j]))
                for j in range(self._rhs_at[n], self._rhs_at[n + 1])]

    def expansions(self, token: str) -> list[tuple[str, ...]]:
        return [e for e, _ in self.expansion_counts(token)]

    def label_df(self, word: str) -> int:
        """How many terms' labels use ``word`` (from its IDF weight; 0 when none does)."""
        w = self.idf.get(stem(word.lower()))
        return 0 if w is None else round(self.meta["terms"] / math.expm1(w))

    def initial_rows(self, token: str) -> tuple[list[str], np.ndarray]:
        """An abbreviation's letter groups (each capital or leading lower-case run) and the rows of the names with
        a run of words of those initials."""
        letters = [p.lower() for p in _ABBREV_PART.findall(token) if p.isalpha()]
        n = self._initial_at.get("".join(p[0] for p in letters)) if 2 <= len(letters) <= ABBREV_MAX else None
        rows = self.arrays["initial_rows"]
        return letters, rows[:0] if n is None else rows[self._row_at[n]:self._row_at[n + 1]]

    def expansion_counts(self, token: str) -> list[tuple[tuple[str, ...], int]]:
        """Name phrases an abbreviation may stand for, most common first: each capital (or leading lower-case run)
        of ``token`` starts a word and its letters appear in that word in order ("APhN" → accessory pharyngeal
        nerve, "CvN" → cervical nerve); digits stay. Scans every name with its initials (:meth:`initial_rows`:
        callers bound how many)."""
        letters, at_rows = self.initial_rows(token)
        rows = at_rows.tolist()
        found: Counter[tuple[str, ...]] = Counter()
        for i in dict.fromkeys(rows):
            nw = self.name_words(i)
            spans = {(at[j], at[j + len(letters) - 1]) for at in _word_positions(nw)
                     for j in range(len(at) - len(letters) + 1)
                     if all(_subsequence(p, nw[w]) for p, w in zip(letters, at[j:j + len(letters)], strict=True))}
            found.update(tuple(nw[a:b + 1]) for a, b in spans)
        return found.most_common(ABBREV_EXPANSIONS)

    def rewrites(self, ws: list[str]) -> list[list[str]]:
        """Rewrites of the word list ``ws`` by the rules: first every rule applied at once (longest left side
        first, most frequent right side), then single substitutions, most frequent first."""
        found = []   # (start, length, right sides)
        # a short query tries every span (a missing left side costs one dict lookup), so a search needs no max_lhs:
        # computing it scans every rule (~10 ms of a ``flysift terms`` call)
        longest = len(ws) if len(ws) <= 8 else self.max_lhs
        i = 0
        while i < len(ws):
            for n in range(min(longest, len(ws) - i), 0, -1):
                rhs = self.rule(ws[i:i + n])
                if rhs and n == len(ws):   # the whole query is a synonym: the engine matches it as such
                    rhs = [r for r in rhs if r[1]]
                if rhs:
                    found.append((i, n, rhs))
            i += 1
        if not found:
            return []
        out: list[list[str]] = []
        combined, end = [], 0
        for i, n, rhs in sorted(found, key=lambda f: (f[0], -f[1])):
            if i >= end:
                combined += ws[end:i] + list(rhs[0][0])
                end = i + n
        out.append(combined + ws[end:])
        singles = sorted(((n, c, i, r) for i, n, rhs in found for r, c in rhs[:2]), key=lambda x: (-x[1], -x[0]))
        for n, _c, i, r in singles:
            out.append(ws[:i] + list(r) + ws[i + n:])
        return list({tuple(o): o for o in out if o != ws}.values())[:MAX_REWRITES]


class _Columns:
    """A model's columns as the vectorised re-ranker reads them: where each term's labels, each label's stems and each
    term's definition stems start, the stems' codes, and per vocabulary code its regulation-frame bit."""

    def __init__(self, lex: RerankModel):
        a = lex.arrays
        starts = lambda x: np.concatenate(([0], np.cumsum(x, dtype=np.int64)))  # noqa: E731
        self.label_at, self.stem_at, self.def_at = starts(a["labels"]), starts(a["sizes"]), starts(a["def_sizes"])
        self.stems, self.def_stems = a["stems"].astype(np.int64), a["def_stems"].astype(np.int64)
        self.weights, self.scopes = a["weights"].astype(np.float64), a["scopes"].astype(np.int64)
        self.generality = a["generality"].astype(np.float64)
        self.code = {t: c for c, t in enumerate(lex.vocab)}
        self.frame_bits = np.zeros(len(lex.vocab) + 1)
        for n, f in enumerate(FRAME):
            if (c := self.code.get(f)) is not None:
                self.frame_bits[c] = 1 << n


class Ranked(NamedTuple):
    """A re-ranked candidate: its score and the label that matched best (0 the name, k the k-th synonym; None for an
    id the model does not know, whose hit keeps the engine's explanation)."""

    id: str
    score: float
    label: int | None


def rerank(lex: RerankModel, variants: list[tuple[str, float]], candidates: list[str], engine: dict[str, float],
           limit: int | None = None) -> list[Ranked] | None:
    """Re-rank candidate ids: ``score = best label similarity + exact-label bonus + W_DEF · definition coverage +
    W_ENGINE · engine (+ generality for one-word queries)``.

    ``variants`` are the query's forms with their discounts (the query as given 1.0, mention forms and rewrites
    less); a label's similarity to a form is their IDF-weighted Dice over stems, × ``FRAME_PENALTY`` when the
    regulation frame differs, × ``SYNONYM_DISCOUNT[scope]`` for synonyms (names first). A form whose stems are
    exactly a label's adds ``EXACT_BONUS[scope]`` × its discount. ``engine`` holds each candidate's engine score over
    the top engine score of its search. Engine-neutral: both engines rank alike. The best ``limit`` (all when
    None), best first; ties keep the candidates' order. None when no variant has a word: the engine's order stands.

    Computed over the model's columns at once (every candidate label × every form as numpy arrays), not label by
    label in Python: about 100 candidates × their labels × up to 10 forms per search."""
    forms = []
    for text, discount in variants:
        toks = stems(words(text))
        if toks:
            idf = {t: lex.idf.get(t, lex.unknown_idf) for t in toks}
            forms.append((toks, idf, sum(idf.values()), _frame(toks), discount))
    if not forms:
        return None
    rows = np.fromiter((lex.index.get(c, -1) for c in candidates), np.int64, len(candidates))
    score = W_ENGINE * np.fromiter((engine.get(c, 0.0) for c in candidates), np.float64, len(candidates))
    label = np.zeros(len(candidates), np.int64)
    known = rows >= 0
    if known.any():
        s, k = _label_scores(lex, forms, rows[known], score[known])
        score[known], label[known] = s, k
    order = np.lexsort((np.arange(len(candidates)), -score))[:limit]
    return [Ranked(candidates[j], float(score[j]), int(label[j]) if known[j] else None) for j in order.tolist()]


def _label_scores(lex: RerankModel, forms: list[tuple[frozenset[str], dict[str, float], float, tuple[bool, ...],
                                                       float]],
                  rows: np.ndarray, engine: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rerank`'s score and best label (against the query itself) of the model's terms ``rows``, whose
    weighted engine scores are ``engine``."""
    cols = lex.columns
    n_forms = len(forms)
    # the forms' stems in the vocabulary (others match no label), and each one's IDF in each form (0: not in it)
    at: dict[int, int] = {}
    for toks, *_ in forms:
        for t in toks:
            c = cols.code.get(t)
            if c is not None:
                at.setdefault(c, len(at))
    ucodes = np.fromiter(at, np.int64, len(at))
    weight_in = np.zeros((len(at), n_forms))
    for f, (toks, idf, *_) in enumerate(forms):
        for t in toks:
            if (c := cols.code.get(t)) is not None:
                weight_in[at[c], f] = idf[t]
    sort = np.argsort(ucodes)
    ucodes = ucodes[sort]

    def matched(codes: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stems among ``codes`` that some form has: their IDF in each form (rows of ``weight_in``) and their
        owners (most stems are in no form, and are left out before any per-form work)."""
        if not len(ucodes) or not len(codes):
            return np.zeros((0, n_forms)), owner[:0]
        j = np.minimum(np.searchsorted(ucodes, codes), len(ucodes) - 1)
        hit = ucodes[j] == codes
        return weight_in[sort[j[hit]]], owner[hit]

    def per_owner(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
        """Row sums of ``values`` (stems × forms) by owner (label or term): n × forms."""
        flat = (owner[:, None] * n_forms + np.arange(n_forms)).ravel()
        return np.bincount(flat, weights=values.ravel(), minlength=n * n_forms).reshape(n, n_forms)

    labels, first_label = _spans(cols.label_at, rows)          # every candidate's labels, and where each starts
    stem_pos, stem_label = _spans(cols.stem_at, labels, owners=True)
    codes = cols.stems[stem_pos]
    found, found_label = matched(codes, stem_label)
    inter = per_owner(found, found_label, len(labels))                     # IDF of the shared stems
    shared = per_owner((found > 0).astype(np.float64), found_label, len(labels))
    size = (cols.stem_at[labels + 1] - cols.stem_at[labels]).astype(np.float64)
    frame = np.bincount(stem_label, weights=cols.frame_bits[codes], minlength=len(labels))
    w = np.array([f[2] for f in forms])
    discount = np.array([f[4] for f in forms])
    form_size = np.array([len(f[0]) for f in forms], dtype=np.float64)
    form_frame = np.array([sum(b << n for n, b in enumerate(f[3])) for f in forms], dtype=np.float64)
    scope = cols.scopes[labels]

    dice = 2 * inter / (w[None, :] + cols.weights[labels][:, None])
    direct = dice[:, discount == 1.0].max(axis=1, initial=0.0)   # the label reported: best against the query itself
    label_discount = np.array([1.0, *(SYNONYM_DISCOUNT.get(s, 0.9) for s in RerankModel.SCOPES[1:])])[scope]
    factor = (discount[None, :] * np.where(frame[:, None] != form_frame[None, :], FRAME_PENALTY, 1.0)
              ) * label_discount[:, None]
    best = np.maximum.reduceat((dice * factor).max(axis=1), first_label)
    bonus = np.array([EXACT_BONUS.get(s, 0.18) for s in RerankModel.SCOPES])[scope]
    is_exact = (shared == form_size[None, :]) & (size[:, None] == form_size[None, :]) & \
        (discount[None, :] >= MENTION_DISCOUNT)
    exact = np.maximum.reduceat(np.where(is_exact, discount[None, :] * bonus[:, None], 0.0).max(axis=1),
                                first_label)
    def_pos, def_term = _spans(cols.def_at, rows, owners=True)
    cover = (per_owner(*matched(cols.def_stems[def_pos], def_term), len(rows))
             / np.where(w > 0, w, 1.0)[None, :]).max(axis=1)
    score = best + exact + W_DEF * cover + engine
    if len(forms[0][0]) == 1:   # a one-word query: the most general of the terms whose label holds it
        score = np.where(best > 0, score + W_GENERAL * cols.generality[rows], score)
    # the first label with the best similarity to the query itself
    owner = np.repeat(np.arange(len(rows)), np.diff(np.append(first_label, len(labels))))
    local = np.arange(len(labels)) - first_label[owner]
    top = np.maximum.reduceat(direct, first_label)
    best_k = np.minimum.reduceat(np.where(direct == top[owner], local, len(labels)), first_label)
    return score, best_k


def _spans(starts: np.ndarray, rows: np.ndarray, owners: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The positions ``starts[r]:starts[r + 1]`` of each row, concatenated, and either where each row's run starts
    in them or (``owners``) the row number of each position."""
    first, count = starts[rows], starts[rows + 1] - starts[rows]
    at = np.cumsum(count) - count
    pos = np.arange(int(count.sum())) + np.repeat(first - at, count)
    return pos, (np.repeat(np.arange(len(rows)), count) if owners else at)
