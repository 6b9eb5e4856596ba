"""The term service: search, lookup, hierarchy walks and FlyAOC-shaped records over the indexed ontologies, with
hidden terms applied everywhere, and the description → term resolver.

What it reads from ``<data_dir>``: ``ontologies/<name>.ontology.json.gz`` (the compact ontology the indexer writes;
reloaded when the file changes) for lookups and the DAG, ``ontologies/<name>.rerank.npz`` (the re-ranker's model,
written with it) and the configured engine's term index (``Engine.term_candidates``, the same search in every engine)
for search. A search reads only the model and the term index: the ontology is loaded for hidden terms and lookups.
An ontology name from a request is checked against :mod:`search.core.names` and then looked up in a listing of that
directory; only the listing's path is opened, and nothing there is a pickle (``*.pkl`` files of earlier versions are
reported, never read; the model's ``.npz`` is mapped by ``search.ontology.rerank_model``, which accepts plain numeric
members only). The ranking is ``search.ontology.rewrites`` (the query's forms), ``search.ontology.rerank`` (the
scores) and ``search.ontology.rerank_model`` (what is learned from the ontology).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from functools import cache, cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from search.core.config import MAX_PAGE_SIZE, MAX_QUERY_CHARS
from search.core.errors import FlysiftError, IndexMissing, InvalidRequest, NotFound
from search.core.models import Term, TermHit
from search.core.names import check_ontology, is_valid, lookup
from search.engines import MIN_PUBLISH_SHARE, BuildRefused, TermEngine, publish_refusal
from search.ontology import encoder
from search.ontology.encoder.mf import activity_shaped
from search.ontology.hidden import DEFAULT_RELATIONS, HiddenSet, expand
from search.ontology.model import (
    GO_ASPECTS,
    IS_A,
    KNOWN,
    KNOWN_RELATIONS,
    RELATION_SETS,
    SUFFIX,
    Ontology,
    spec_for_id,
)
from search.ontology.ranking import Label, LexicalRanking
from search.ontology.rerank import Ranked, engine_scores, engine_searches, rerank, variants
from search.ontology.rerank_model import RerankModel
from search.ontology.rewrites import query_forms
from search.schema.hidden import parse_hidden
from search.schema.terms import (
    ResolvedTerm,
    TermList,
    TermLookup,
    TermRef,
    TermResolveResponse,
    TermSearchResponse,
)
from search.text.analysis import query_variants
from search.text.term_search import id_query

if TYPE_CHECKING:
    from search.ontology.dense_terms import DenseTermIndexes
    from search.ontology.encoder.fusion import Candidates
    from search.ontology.encoder.runtime import Loaded, TermEncoders

ASPECTS = ("P", "F", "C")
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


def _bool(value: bool | str | None) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


class TermService:
    """Everything the API and CLI do with terms, for the ontologies indexed in ``data_dir``.

    Term search goes to ``engine``, the configured one (``search.services.Services.terms`` wires it): in cluster mode
    terms are searched on the cluster the indexer wrote them to. A tool or test that holds a folder passes the
    embedded engine of that folder (``search.engines.open_local``); the service never picks an engine itself."""

    def __init__(self, data_dir: Path | str, engine: TermEngine, *, max_limit: int = MAX_PAGE_SIZE,
                 max_query_chars: int = MAX_QUERY_CHARS):
        """``max_limit`` and ``max_query_chars`` are the settings ``max_page_size`` and ``max_query_chars``."""
        self.data_dir = Path(data_dir)
        self.engine = engine
        self.max_limit, self.max_query_chars = max_limit, max_query_chars
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

    def encoder_of(self, ontology: str) -> Loaded:
        """The data dir's term encoder loaded for ``ontology`` (manifest, vectors, query encoder);
        ``DenseUnavailable`` (409) where it does not fit the served ontology."""
        return self.encoders.get(ontology, lambda: self.ontology(ontology), self._indexed(ontology))

    def _default_mode(self, ontology: str) -> str:
        """hybrid when the data dir holds a term encoder that fits the served ontology, else bm25 (as before)."""
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
                       write_terms: Callable[[str, Iterable[Term]], int] | None = None, *,
                       allow_shrink: bool = False, min_share: float = MIN_PUBLISH_SHARE) -> int:
        """Index the terms with ``write_terms`` (the service's engine's unless given), then save the compact ontology
        the service reads. An ontology much smaller than the one indexed under its name is refused (the corpus
        builds' guard, ``publish_refusal``) unless ``allow_shrink``: the live one keeps serving."""
        live = self._live_terms(ontology.name)
        if refusal := publish_refusal(len(ontology), live, min_share=min_share, allow_shrink=allow_shrink,
                                      items="terms", what="index", override="--allow-shrink"):
            raise BuildRefused(f"ontology {ontology.name!r} was not indexed: {refusal}.",
                               details={"ontology": ontology.name, "terms": len(ontology), "live": live,
                                        "min_share": min_share})
        n = (write_terms or self.engine.write_terms)(ontology.name, ontology.terms())
        ontology.save(self.ontology_path(ontology.name))
        self._save_model(ontology.name, RerankModel.learn(ontology))
        return n

    def _live_terms(self, name: str) -> int:
        """Terms of the ontology indexed as ``name`` now (0 when none is, or it cannot be read: nothing to keep)."""
        if name not in self.names():
            return 0
        try:
            return len(self.ontology(name))
        except FlysiftError:
            return 0

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
        shaped = activity_shaped(query) if lex.has_aspects else None
        # the MF rule (search.ontology.encoder.mf): no molecular function for a query that names no activity
        abstain_mf = mf_activity_only and shaped is False and not id_query(query)
        hits: list[TermHit] = []
        if not (abstain_mf and aspect == "F"):
            hits = self._hits(ontology, lex, query, self.max_limit if abstain_mf else limit, filters, mode)
            if abstain_mf:   # MF hits dropped: asked deep enough for ``limit`` of the others
                hits = [h for h in hits if h.aspect != "F"][:limit]
        return TermSearchResponse(ontology=ontology, query=query, aspect=aspect, hidden=len(hid), mode=mode,
                                  activity_shaped=shaped, hits=hits)

    def _hits(self, ontology: str, lex: RerankModel, query: str, limit: int, filters: dict[str, Any], mode: str
              ) -> list[TermHit]:
        """The ranking in ``mode``: an id query stays a lookup in every mode; ``dense`` and ``hybrid`` use the data
        dir's term encoder where there is one (search.ontology.encoder.fusion), else the dense term index."""
        if id_query(query):
            return self.engine.search_terms(ontology, query, limit=limit, **filters)
        if mode == "bm25":
            return self._ranked(ontology, lex, query, limit, filters)

        def lexical(depth: int) -> LexicalRanking:
            return self._lexical(ontology, lex, query, depth, filters)

        if encoder.present(self.data_dir):
            from search.ontology.encoder.fusion import search as encoder_search

            return encoder_search(self.encoders, self.engine, ontology, query, limit, filters, mode, lexical=lexical,
                                  ontology=lambda: self.ontology(ontology), ontology_key=self._indexed(ontology))
        return self.dense.search(self.engine, ontology, query, limit, filters, mode, lexical=lexical,
                                 ontology=lambda: self.ontology(ontology), ontology_key=self._indexed(ontology))

    def fusion_candidates(self, ontology: str, query: str, limit: int = 10) -> Candidates | None:
        """What a hybrid search of ``query`` (no aspect, nothing hidden) fuses, before the weight
        (search.ontology.encoder.fusion.gather): the hold-out fuses one gathering at each weight it compares. None
        for an id query (a lookup in every mode); ``DenseUnavailable`` (409) without an encoder that fits."""
        lex = self.rerank_model(ontology)
        query = self._check_query(query)
        if id_query(query):
            return None
        from search.ontology.encoder.fusion import gather

        filters: dict[str, Any] = {"aspect": None, "exclude_ids": frozenset(), "include_obsolete": False}
        return gather(self.encoder_of(ontology), query, self._check_limit(limit), filters,
                      lambda depth: self._lexical(ontology, lex, query, depth, filters))

    def rerank_model(self, ontology: str | Ontology) -> RerankModel:
        """The re-ranker's model of an indexed ontology: the one saved at indexing, or learned now from the ontology
        (once per version of its files)."""
        name = ontology.name if isinstance(ontology, Ontology) else ontology
        _, mtime = self._indexed(name)
        key: tuple[int, int | None] = (mtime, None)
        with contextlib.suppress(OSError):
            key = (mtime, self.model_path(name).stat().st_mtime_ns)
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
        """The lexical ranking's best ``limit`` as hits."""
        return self._lexical(ontology, lex, query, limit, filters).hits()

    def _lexical(self, ontology: str, lex: RerankModel, query: str, limit: int, filters: dict[str, Any]
                 ) -> LexicalRanking:
        """Engine candidates for the query and its best rewrites (:func:`search.ontology.rewrites.query_forms`; one
        engine call, ids and scores only), re-ranked (:func:`search.ontology.rerank.rerank`), the best ``limit``;
        their hits are built when asked (search.ontology.ranking: a fusion shows few of them)."""
        forms = query_forms(lex, query)
        first, scores = engine_scores(self.engine.term_candidates(ontology, engine_searches(forms, limit), **filters))
        ranked = rerank(lex, variants(forms), list(first), scores, limit)
        if ranked is None:
            ranked = [Ranked(cid, score, None) for cid, score in list(first.items())[:limit]]

        def synonym(r: Ranked) -> str | None:
            return lex.synonym(lex.index[r.id], r.label - 1) if r.label else None

        def build(positions: list[int], scores: list[float]) -> list[TermHit]:
            chosen = [ranked[i] for i in positions]
            # the engine explains only hits the model does not know (the label the re-ranker matched says it
            # otherwise)
            tokens = {t for v in query_variants(forms.query) for t in v} if any(r.label is None for r in chosen) \
                else set()
            built = {h.id: h for h in self.engine.term_hits(ontology, [r.id for r in chosen], tokens)}
            out = []
            for r, score in zip(chosen, scores, strict=True):
                if (h := built.get(r.id)) is not None:
                    update: dict[str, Any] = {"score": round(score, 4)}
                    if r.label is not None:
                        update["matched_synonym"] = synonym(r)
                    out.append(h.model_copy(update=update))
            return out

        served = cache(lambda: self.ontology(ontology))   # loaded already where an encoder asks for labels

        def label(i: int) -> Label:
            r = ranked[i]
            name = served().name_of(r.id) if r.label is not None else ""
            if not name:   # an id the model does not know (or a model and ontology between two versions)
                built = build([i], [r.score])
                return Label(built[0].name, built[0].matched_synonym) if built else Label("", None)
            return Label(name, synonym(r))

        # the scores the hits show (rounded): a fusion adds to what a caller of the lexical ranking sees
        return LexicalRanking([r.id for r in ranked], [round(r.score, 4) for r in ranked], label=label, build=build)

    def _check_query(self, query: str) -> str:
        query = (query or "").strip()
        if not query:
            raise InvalidRequest("query: empty query", details={"field": "query"})
        if len(query) > self.max_query_chars:
            raise InvalidRequest(f"query: longer than {self.max_query_chars} characters",
                                 details={"field": "query", "max": self.max_query_chars})
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

    def _check_limit(self, limit: int) -> int:
        if not 1 <= int(limit) <= self.max_limit:
            raise InvalidRequest(f"limit: must be between 1 and {self.max_limit}",
                                 details={"field": "limit", "max": self.max_limit})
        return int(limit)

    def _relations(self, ont: Ontology, relations: str | Iterable[str] | None) -> list[str]:
        rels = ont.expand_relations(relations)
        unknown = [r for r in rels if r not in ont.relations and r not in KNOWN_RELATIONS]
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
