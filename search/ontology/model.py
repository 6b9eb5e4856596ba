"""Ontologies (GO, FBbt, FBdv or any OBO, OWL or OBO Graphs file): loading, a compact cache, the DAG and Wang
similarity. Reading the files is ``search.ontology.formats``.

Loading GO from OBO takes seconds, so :meth:`Ontology.load` keeps the normalised columns keyed by the file's SHA-256
(``~/.cache/flysift/ontologies`` or ``$FLYSIFT_ONTOLOGY_CACHE``); later loads read that. The compact form (also what
the service reads from its data dir) is gzipped JSON with one flat list per column, never a pickle: a planted or
corrupted file can fail to load but cannot run code. A cache that does not read back is rebuilt from the OBO file,
as is one of an older :data:`CACHE_FORMAT`; ``*.pkl`` files of earlier versions are ignored.

Relations are named as in the file, except that a relation given by a prefixed id (``FBdv:00018001``,
``BFO:0000050``) takes its ``[Typedef]`` name with spaces as underscores (``substage_of``, ``part_of``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import islice
from pathlib import Path
from typing import Literal

import numpy as np

from search.core.errors import InputError, InvalidRequest
from search.core.models import Synonym, Term
from search.core.names import check_ontology
from search.ontology.formats import IS_A, parse

#: the compact form's layout; files of another format are not read (a cache is rebuilt, a data dir re-indexed)
CACHE_FORMAT = 2
#: what the compact form's files end with
SUFFIX = ".json.gz"

PART_OF = "part_of"
#: "is a kind of / is a part of": the default relation set of ancestors and descendants (FBdv's part-of is
#: ``substage_of``).
HIERARCHY: tuple[str, ...] = (IS_A, PART_OF, "substage_of")
REGULATES: tuple[str, ...] = ("regulates", "positively_regulates", "negatively_regulates")
#: Named relation sets accepted wherever relations are; ``all`` means every relation of the file.
RELATION_SETS: dict[str, tuple[str, ...] | None] = {
    "is_a": (IS_A,), "hierarchy": HIERARCHY, "is_a+part_of": (IS_A, PART_OF),
    "regulates": (IS_A, PART_OF) + REGULATES, "all": None,
}

GO_ASPECTS: dict[str, Literal["P", "F", "C"]] = {"biological_process": "P", "molecular_function": "F",
                                                  "cellular_component": "C"}


@dataclass(frozen=True)
class OntologySpec:
    """What the service knows about a named ontology: id shape and FlyAOC's record key."""

    name: str
    prefix: str
    id_pattern: str
    id_field: str
    example: str

    def valid_id(self, term_id: str) -> bool:
        return re.fullmatch(self.id_pattern, term_id) is not None


KNOWN: dict[str, OntologySpec] = {
    "go": OntologySpec("go", "GO", r"GO:\d{7}", "go_id", "GO:0005634"),
    "fbbt": OntologySpec("fbbt", "FBbt", r"FBbt:\d{8}", "fbbt_id", "FBbt:00004508"),
    "fbdv": OntologySpec("fbdv", "FBdv", r"FBdv:\d{8}", "fbdv_id", "FBdv:00005289"),
}


def spec_for_id(term_id: str) -> OntologySpec | None:
    """The known ontology whose prefix ``term_id`` carries (``GO:…`` → go), if any."""
    prefix = term_id.split(":", 1)[0]
    return next((s for s in KNOWN.values() if s.prefix == prefix), None)


def default_cache_dir() -> Path:
    return Path(os.environ.get("FLYSIFT_ONTOLOGY_CACHE") or Path.home() / ".cache" / "flysift" / "ontologies")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_json_atomic(path: Path, data: object) -> None:
    """Write gzipped JSON so that readers see the old file or the whole new one, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as fh:
            fh.write(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> object:
    """A file written by :func:`write_json_atomic`. Anything that is not gzipped JSON (truncated, planted, too deeply
    nested) is a ``ValueError`` naming the file; ``OSError`` is left for a file that cannot be opened."""
    with open(path, "rb") as raw:
        blob = raw.read()
    try:
        return json.loads(gzip.decompress(blob))
    except (OSError, EOFError, zlib.error, ValueError, RecursionError) as e:   # BadGzipFile is an OSError
        raise ValueError(f"{path}: not a gzipped JSON file ({type(e).__name__}: {str(e)[:100]})") from None


# ---- the compact form --------------------------------------------------------------------------------------------
#
# One flat JSON list per column (parsing millions of small nested lists is what makes JSON slow): per-term tuples
# (synonyms, alt ids, replacements) as a count per term plus the values in order; edges as four parallel lists.

_SCALARS = ("ids", "names", "namespaces", "defs", "obsolete")
_TUPLES = ("alt_ids", "replaced_by", "consider")


def _encode(d: dict, sha256: str) -> dict:
    out = {"format": CACHE_FORMAT, "sha256": sha256, **{k: d[k] for k in ("name", "source", "data_version")},
           **{k: list(d[k]) for k in _SCALARS}}
    for k in _TUPLES:
        out[k] = {"n": [len(v) for v in d[k]], "v": [x for v in d[k] for x in v]}
    syns = d["synonyms"]
    out["synonyms"] = {"n": [len(v) for v in syns], "text": [t for v in syns for t, _ in v],
                       "scope": [s for v in syns for _, s in v]}
    child, rel, parent, qual = zip(*d["edges"], strict=True) if d["edges"] else ((), (), (), ())
    out["edges"] = {"child": list(child), "rel": list(rel), "parent": list(parent), "qualified": list(qual)}
    return out


def _grouped(counts: list[int], values: Iterable, total: int) -> list[tuple]:
    """``values`` cut into tuples of ``counts[i]`` items; ``total`` is how many values there are."""
    if counts and (sum(counts) != total or min(counts) < 0):   # strings in counts: TypeError, reported as malformed
        raise ValueError("counts do not add up to the values")
    it = iter(values)
    return [tuple(islice(it, c)) if c else () for c in counts]


def _decode(data: object) -> tuple[dict, str]:
    """The in-memory columns and SHA-256 from :func:`_encode`'s output; ``ValueError`` for anything else."""
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        raise ValueError(f"not a flysift ontology file of format {CACHE_FORMAT}")
    try:
        n = len(data["ids"])
        cols = {k: data[k] for k in _SCALARS}
        if any(not isinstance(v, list) or len(v) != n for v in cols.values()):
            raise ValueError("columns of different lengths")
        for k in _TUPLES:
            cols[k] = _grouped(data[k]["n"], data[k]["v"], len(data[k]["v"]))
        syn = data["synonyms"]
        if len(syn["text"]) != len(syn["scope"]):
            raise ValueError("synonym texts and scopes differ in length")
        cols["synonyms"] = _grouped(syn["n"], zip(syn["text"], syn["scope"], strict=True), len(syn["text"]))
        e = data["edges"]
        # lengths are checked just below, with the loader's own message
        edges = list(zip(e["child"], e["rel"], e["parent"], e["qualified"], strict=False))
        if any(len(e[k]) != len(edges) for k in ("child", "rel", "parent", "qualified")) or \
                (edges and not 0 <= min(e["child"]) <= max(e["child"]) < n):
            raise ValueError("malformed edges")
        if any(len(cols[k]) != n for k in (*_TUPLES, "synonyms")):
            raise ValueError("columns of different lengths")
        meta = {k: data[k] for k in ("name", "source", "data_version")}
        sha = data["sha256"]
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"malformed flysift ontology file ({type(e).__name__}: {str(e)[:100]})") from None
    if not isinstance(meta["name"], str) or not isinstance(sha, str):
        raise ValueError("malformed flysift ontology file (name, sha256)")
    return {"format": CACHE_FORMAT, **meta, **cols, "edges": edges}, sha


# ---- the ontology -------------------------------------------------------------------------------------------------

class Ontology:
    """An ontology's terms and relations, held as columns so loading from the cache is fast; :class:`Term` models
    are made on demand."""

    def __init__(self, data: dict, sha256: str = ""):
        self.name: str = data["name"]
        self.source: str = data["source"]
        self.data_version: str | None = data["data_version"]
        self.sha256 = sha256
        self._d = data
        self._ids: list[str] = data["ids"]
        self._index: dict[str, int] = {t: i for i, t in enumerate(self._ids)}
        self._alt: dict[str, str] = {a: self._ids[i] for i, alts in enumerate(data["alt_ids"]) for a in alts
                                     if a not in self._index}

    @property
    def columns(self) -> dict:
        """The normalised columns (``ids``, ``names``, ``defs``, ``synonyms``…), one row per term: bulk readers
        (the term re-ranker) use them, since making a :class:`Term` per term costs seconds on GO."""
        return self._d

    @property
    def row_of(self) -> dict[str, int]:
        """Primary id → row in :attr:`columns`."""
        return self._index

    # -- construction ----------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, name: str, *, cache_dir: str | Path | None = None,
             use_cache: bool = True) -> Ontology:
        """Load an ontology file (OBO, OWL RDF/XML or OBO Graphs JSON, plain or gzipped: ``search.ontology.formats``),
        from the compact cache when the file was seen before (a cache file that does not read back is rebuilt)."""
        check_ontology(name, "name")   # part of the cache file's name
        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: no such ontology file", source=str(path))
        sha = file_sha256(path)
        cache = Path(cache_dir) if cache_dir else default_cache_dir()
        cached = cache / f"{name}-{sha[:24]}{SUFFIX}"
        if use_cache and cached.is_file():
            try:
                ont = cls.read(cached)
            except (OSError, ValueError):
                ont = None
            if ont is not None and ont.sha256 == sha and ont.name == name:
                return ont
        ont = cls({"format": CACHE_FORMAT, **parse(path, name)}, sha)
        if use_cache:
            ont.save(cached)
        return ont

    @classmethod
    def from_terms(cls, name: str, terms: Iterable[Term], source: str = "", data_version: str | None = None
                   ) -> Ontology:
        """Build from :class:`Term` models (the shape engines receive); is_a qualifiers are not represented."""
        cols: dict[str, list] = {k: [] for k in ("ids", "names", "namespaces", "defs", "synonyms", "alt_ids",
                                                   "obsolete", "replaced_by", "consider")}
        edges: list[tuple[int, str, str, bool]] = []
        for idx, t in enumerate(terms):
            for key, val in (("ids", t.id), ("names", t.name), ("namespaces", t.namespace), ("defs", t.definition),
                             ("synonyms", tuple((s.text, s.scope) for s in t.synonyms)),
                             ("alt_ids", tuple(t.alt_ids)), ("obsolete", t.obsolete),
                             ("replaced_by", tuple(t.replaced_by)), ("consider", tuple(t.consider))):
                cols[key].append(val)
            edges.extend((idx, rel, p, False) for rel, ps in t.parents.items() for p in ps)
        return cls({"format": CACHE_FORMAT, "name": name, "source": source, "data_version": data_version,
                    **cols, "edges": edges})

    def save(self, path: str | Path) -> None:
        """Write the compact form (gzipped JSON, atomically: a reader never sees half a file)."""
        write_json_atomic(Path(path), _encode(self._d, self.sha256))

    @classmethod
    def read(cls, path: str | Path) -> Ontology:
        """Read what :meth:`save` wrote; ``ValueError`` naming the file for anything else (``OSError`` when it
        cannot be opened)."""
        try:
            data, sha = _decode(read_json(Path(path)))
        except ValueError as e:
            msg = str(e)
            raise ValueError(msg if msg.startswith(f"{path}:") else f"{path}: {msg}") from None
        return cls(data, sha)

    # -- lookups ---------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, term_id: str) -> bool:
        return term_id in self._index

    @property
    def ids(self) -> Sequence[str]:
        return self._ids

    def resolve(self, term_id: str) -> str | None:
        """The primary id for a primary or alternative id; None when the ontology does not know it."""
        if term_id in self._index:
            return term_id
        return self._alt.get(term_id)

    def is_obsolete(self, term_id: str) -> bool:
        i = self._index.get(term_id)
        return i is not None and self._d["obsolete"][i]

    def name_of(self, term_id: str) -> str:
        i = self._index.get(term_id)
        return self._d["names"][i] if i is not None else ""

    def get(self, term_id: str) -> Term | None:
        """The term whose primary id is ``term_id`` (alt ids: use :meth:`resolve` first)."""
        i = self._index.get(term_id)
        return None if i is None else self._term(i)

    def terms(self) -> Iterator[Term]:
        return (self._term(i) for i in range(len(self._ids)))

    def _term(self, i: int) -> Term:
        d = self._d
        ns = d["namespaces"][i]
        return Term(id=self._ids[i], ontology=self.name, name=d["names"][i], namespace=ns,
                    aspect=GO_ASPECTS.get(ns or ""), definition=d["defs"][i],
                    synonyms=[Synonym(text=t, scope=s) for t, s in d["synonyms"][i]],
                    alt_ids=list(d["alt_ids"][i]), obsolete=d["obsolete"][i],
                    replaced_by=list(d["replaced_by"][i]), consider=list(d["consider"][i]),
                    parents=self.parents_of(self._ids[i]), depth=self._depth[i])

    def parents_of(self, term_id: str) -> dict[str, list[str]]:
        """Direct parents by relation, as written in the file."""
        out: dict[str, list[str]] = {}
        for rel, parent, _q in self._edges_by_child.get(self._index.get(term_id, -1), ()):
            out.setdefault(rel, []).append(parent)
        return out

    @property
    def relations(self) -> list[str]:
        return sorted({e[1] for e in self._d["edges"]})

    @cached_property
    def has_aspects(self) -> bool:
        """Whether any term sits in a GO namespace (only then does an aspect filter mean something)."""
        return any(ns in GO_ASPECTS for ns in set(self._d["namespaces"]))

    # -- graph -----------------------------------------------------------------------------------------------------
    @cached_property
    def _edges_by_child(self) -> dict[int, list[tuple[str, str, bool]]]:
        out: dict[int, list[tuple[str, str, bool]]] = {}
        for child, rel, parent, qual in self._d["edges"]:
            out.setdefault(child, []).append((rel, parent, qual))
        return out

    @cached_property
    def _up(self) -> dict[str, dict[int, list[int]]]:
        """relation → child index → parent indices (parents known to this ontology only)."""
        out: dict[str, dict[int, list[int]]] = {}
        for child, rel, parent, _q in self._d["edges"]:
            p = self._index.get(parent)
            if p is not None:
                out.setdefault(rel, {}).setdefault(child, []).append(p)
        return out

    @cached_property
    def _down(self) -> dict[str, dict[int, list[int]]]:
        out: dict[str, dict[int, list[int]]] = {}
        for rel, m in self._up.items():
            for child, parents in m.items():
                for p in parents:
                    out.setdefault(rel, {}).setdefault(p, []).append(child)
        return out

    @cached_property
    def _depth(self) -> list[int]:
        """Longest ``is_a`` path to a root (goatools' *depth*); roots and obsolete terms are 0."""
        up = self._up.get(IS_A, {})
        depth = [-1] * len(self._ids)
        for start in range(len(self._ids)):
            if depth[start] >= 0:
                continue
            stack, on_path = [start], {start}
            while stack:
                i = stack[-1]
                nxt = next((p for p in up.get(i, ()) if depth[p] < 0 and p not in on_path), None)
                if nxt is not None:  # one parent at a time, so on_path is a path and cycles are skipped
                    stack.append(nxt)
                    on_path.add(nxt)
                    continue
                stack.pop()
                on_path.discard(i)
                depth[i] = 1 + max((depth[p] for p in up.get(i, ())), default=-1)
        return depth

    def expand_relations(self, relations: str | Iterable[str] | None) -> list[str]:
        """Relation names from a set name of :data:`RELATION_SETS`, a comma-separated string, a list, or None (all)."""
        if relations is None:
            return list(self._up)
        if isinstance(relations, str):
            if relations in RELATION_SETS:
                rs = RELATION_SETS[relations]
                return list(self._up) if rs is None else list(rs)
            relations = [r for r in relations.split(",") if r]
        return list(relations)

    def _walk(self, term_id: str, maps: list[dict[int, list[int]]]) -> list[str]:
        start = self._index.get(term_id)
        if start is None:
            return []
        seen, frontier = {start}, [start]
        while frontier:
            nxt = []
            for i in frontier:
                for m in maps:
                    for j in m.get(i, ()):
                        if j not in seen:
                            seen.add(j)
                            nxt.append(j)
            frontier = nxt
        seen.discard(start)
        return [self._ids[j] for j in sorted(seen)]

    def ancestors(self, term_id: str, relations: str | Iterable[str] | None = HIERARCHY) -> list[str]:
        """All ancestors over the given relations (a name of :data:`RELATION_SETS`, a list, or None for all)."""
        return self._walk(term_id, [self._up.get(r, {}) for r in self.expand_relations(relations)])

    def descendants(self, term_id: str, relations: str | Iterable[str] | None = HIERARCHY) -> list[str]:
        return self._walk(term_id, [self._down.get(r, {}) for r in self.expand_relations(relations)])

    def children(self, term_id: str, relations: str | Iterable[str] | None = (IS_A,)) -> list[str]:
        """Direct children over the relations (default ``is_a``, as FlyAOC's ``get_term_children``)."""
        i = self._index.get(term_id)
        if i is None:
            return []
        out = {c for r in self.expand_relations(relations) for c in self._down.get(r, {}).get(i, ())}
        return [self._ids[c] for c in sorted(out)]

    def parents(self, term_id: str, relations: str | Iterable[str] | None = (IS_A,)) -> list[str]:
        """Direct parents known to this ontology, over the relations, in file order."""
        i = self._index.get(term_id)
        if i is None:
            return []
        out = [p for r in self.expand_relations(relations) for p in self._up.get(r, {}).get(i, ())]
        return [self._ids[p] for p in dict.fromkeys(out)]

    def stats(self) -> dict:
        d = self._d
        return {"name": self.name, "terms": len(self._ids), "obsolete": sum(d["obsolete"]),
                "alt_ids": len(self._alt), "synonyms": sum(len(s) for s in d["synonyms"]),
                "edges": {r: sum(len(v) for v in m.values()) for r, m in sorted(self._up.items())},
                "data_version": self.data_version}


# ---- Wang similarity ----------------------------------------------------------------------------------------------

WANG_WEIGHTS = {IS_A: 0.8, PART_OF: 0.6}


class WangSimilarity:
    """Wang et al. (2007) semantic similarity with FlyAOC's DAG rules (spec §4.4).

    ``flavour="go"``: live terms, ``is_a`` + ``part_of`` edges, alt ids resolve to their primary, terms of
    different namespaces score 0. ``flavour="fbbt"``: live ``FBbt:`` terms, unqualified ``is_a`` edges to ``FBbt:``
    parents only, alt ids not resolved. In both, identical id strings score 1 first, even when unknown.

    S-values use ``S_A = {A: 1} ∪ max over parents p of w(A→p)·S_p`` (the best upward path from A starts with
    one of A's edges), memoised per term, so an evaluation run computes each term's ancestors once.
    """

    def __init__(self, ontology: Ontology | str | Path, flavour: str | None = None, *,
                 cache_dir: str | Path | None = None):
        if not isinstance(ontology, Ontology):
            ontology = Ontology.load(ontology, flavour or "go", cache_dir=cache_dir)
        flavour = flavour or ontology.name
        if flavour not in ("go", "fbbt"):
            raise InvalidRequest(f"unknown Wang flavour {flavour!r}", details={"valid": ["go", "fbbt"]})
        self.ontology, self.flavour = ontology, flavour
        d = ontology._d
        ids, index = ontology._ids, ontology._index
        live = [not d["obsolete"][i] and (flavour == "go" or t.startswith("FBbt:")) for i, t in enumerate(ids)]
        self._node: dict[str, int] = {t: i for i, t in enumerate(ids) if live[i]}
        if flavour == "go":
            for alt, primary in ontology._alt.items():
                if live[index[primary]]:
                    self._node[alt] = index[primary]
        up: dict[int, dict[int, float]] = {}
        for child, rel, parent, qual in d["edges"]:
            p = index.get(parent)
            if p is None or not live[child] or not live[p]:
                continue
            if flavour == "go" and rel not in WANG_WEIGHTS:
                continue
            if flavour == "fbbt" and (rel != IS_A or qual or not parent.startswith("FBbt:")):
                continue
            w = WANG_WEIGHTS[rel]
            edges = up.setdefault(child, {})
            edges[p] = max(w, edges.get(p, 0.0))
        self._up = up
        self._ns = d["namespaces"]
        self._s: dict[int, dict[int, float]] = {}
        self._sv: dict[int, float] = {}

    def svalues(self, node: int) -> dict[int, float]:
        """``{ancestor index: S-value}`` of a term index (itself included), computed parents first."""
        done = self._s
        if node in done:
            return done[node]
        stack, on_path = [node], {node}
        while stack:
            i = stack[-1]
            nxt = next((p for p in self._up.get(i, ()) if p not in done and p not in on_path), None)
            if nxt is not None:  # one parent at a time; a parent already on the path (a cycle) is skipped
                stack.append(nxt)
                on_path.add(nxt)
                continue
            stack.pop()
            on_path.discard(i)
            s = {i: 1.0}
            for p, w in self._up.get(i, {}).items():
                for t, v in done.get(p, {}).items():
                    v *= w
                    if v > s.get(t, 0.0):
                        s[t] = v
            done[i] = s
            self._sv[i] = sum(s.values())
        return done[node]

    def _comparable(self, a: int, b: int) -> bool:
        return self.flavour != "go" or self._ns[a] == self._ns[b]

    def sim(self, a: str, b: str) -> float:
        if a == b:
            return 1.0
        na, nb = self._node.get(a), self._node.get(b)
        if na is None or nb is None or not self._comparable(na, nb):
            return 0.0
        sa, sb = self.svalues(na), self.svalues(nb)
        if len(sb) < len(sa):
            sa, sb = sb, sa
        shared = sum(v + sb[t] for t, v in sa.items() if t in sb)
        return shared / (self._sv[na] + self._sv[nb])

    def matrix(self, preds: Sequence[str], truths: Sequence[str]) -> np.ndarray:
        """``len(preds) × len(truths)`` similarities, vectorised over the union of the terms' ancestors."""
        out = np.zeros((len(preds), len(truths)))
        if not len(preds) or not len(truths):
            return out
        pn = [self._node.get(p) for p in preds]
        tn = [self._node.get(t) for t in truths]
        nodes = sorted({n for n in pn + tn if n is not None})
        if nodes:
            row = {n: k for k, n in enumerate(nodes)}
            cols: dict[int, int] = {}
            entries = [(row[n], cols.setdefault(t, len(cols)), v) for n in nodes for t, v in self.svalues(n).items()]
            r, c, v = (np.array(x) for x in zip(*entries, strict=True))
            s = np.zeros((len(nodes), len(cols)))
            s[r, c] = v
            ind = (s > 0).astype(float)
            num = s @ ind.T + ind @ s.T
            sv = s.sum(axis=1)
            sims = num / (sv[:, None] + sv[None, :])
            if self.flavour == "go":
                ns = np.array([self._ns[n] or "" for n in nodes], dtype=object)
                sims[ns[:, None] != ns[None, :]] = 0.0
            pi = np.array([row.get(n, -1) if n is not None else -1 for n in pn])
            ti = np.array([row.get(n, -1) if n is not None else -1 for n in tn])
            pm, tm = pi >= 0, ti >= 0
            out[np.ix_(pm, tm)] = sims[np.ix_(pi[pm], ti[tm])]
        same = np.array(preds, dtype=object)[:, None] == np.array(truths, dtype=object)[None, :]
        out[same] = 1.0
        return out

    def best_match_sums(self, preds: Sequence[str], truths: Sequence[str]) -> list[float]:
        """For each truth, its best similarity to any prediction (the summands of semantic recall; 0 when
        ``preds`` is empty). For recall@k pass ``preds[:k]``, or take ``np.maximum.accumulate(matrix(...))``."""
        if not len(preds):
            return [0.0] * len(truths)
        return self.matrix(preds, truths).max(axis=0).tolist()
