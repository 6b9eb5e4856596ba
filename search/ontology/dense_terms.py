"""The optional dense term index: every live term's name, synonyms and definition embedded with the project's
sentence-transformers model (the passage index's model and backend, :mod:`search.engines.dense`), so that term
search can find paraphrases that share no word with a label ("GIM complex" → prefoldin complex), fused with the
lexical ranking by reciprocal-rank fusion (``mode=hybrid``) or alone (``mode=dense``).

It lives beside the lexical index's compact ontology, written by ``flysift index ontology`` when the ``dense`` extra
is installed::

    <data_dir>/ontologies/<name>.dense-terms.npy         float16 (vectors × dim), unit length
    <data_dir>/ontologies/<name>.dense-terms.labels.npy  int32 (vectors × 3): term number, label, scope code
    <data_dir>/ontologies/<name>.dense-terms.json        manifest: model, backend, dim, counts, the ids, the digest of
                                                         the ontology's labels it was built from

A label is 0 for the name, k for the term's k-th synonym (its scope kept as a code) and -1 for the definition. Both
arrays are read with ``allow_pickle=False`` and checked against the manifest (shape, dtype, ranges); the manifest's
digest must equal the served ontology's and its model the configured one. A file that fails any check is ignored
with one log line (dense and hybrid searches answer ``409 dense_unavailable`` saying how to rebuild), never a crash.
Files are written to temporary names and renamed, the manifest last, so a reader sees one build or none.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from search.core.errors import InvalidRequest
from search.core.models import TermHit
from search.core.names import check_ontology
from search.engines import TermEngine
from search.engines.dense import DenseUnavailable, embed, load_encoder, model_name, resolve_encoder
from search.ontology.loaded import ReloadingCache
from search.ontology.model import Ontology
from search.ontology.query_vectors import Nearest, QueryVectors, dot_rows, nearest_terms, top_rows
from search.ontology.ranking import LexicalRanking, hits_of
from search.retrieval.fusion import rrf

log = logging.getLogger(__name__)

FORMAT = 1
VECTORS_FILE = ".dense-terms.npy"
LABELS_FILE = ".dense-terms.labels.npy"
MANIFEST_FILE = ".dense-terms.json"
#: what is embedded per term (measured: docs/ontologies.md, "Dense term index")
PARTS = ("name", "synonyms", "definition")
DEFINITION = -1
SCOPES = ("NAME", "EXACT", "NARROW", "BROAD", "RELATED", "DEFINITION")
MODES = ("bm25", "dense", "hybrid")
#: terms the dense side contributes to a fusion, and how deep the lexical list goes into it
DENSE_POOL = 50
LEXICAL_DEPTH = 20
#: the fusion: RRF constant and the dense list's weight (1 and 60 would be plain RRF). Measured on the FBbt strict
#: dev split (bench_dense_terms --dev-seed 7): plain RRF lost 0.09 top-1 against the lexical ranking (dense alone is
#: far weaker there), k 5 with weight 0.1 kept it (0.294 / 0.426 vs 0.292 / 0.422): the dense side breaks ties and
#: answers where the lexical side finds little (paraphrases without a shared word)
TERM_RRF_K = 5
DENSE_WEIGHT = 0.1
BATCH = 64
MAX_MANIFEST_BYTES = 64 << 20   # GO's ids and aspects take ~1 MB


def check_mode(mode: str | None) -> str:
    """``bm25`` (the default: the lexical ranking), ``dense`` or ``hybrid``; anything else is a 422."""
    mode = (mode or "bm25").strip().lower()
    if mode not in MODES:
        raise InvalidRequest(f"mode: {mode[:40]!r} is not one of {', '.join(MODES)}",
                             details={"field": "mode", "valid": list(MODES)})
    return mode


def extra_installed() -> bool:
    """Whether a dense term index can be built here (the ``dense`` extra and its packaged model)."""
    try:
        resolve_encoder("cpu", None)
        model_name()
    except DenseUnavailable:
        return False
    return True


# ---- what is embedded ------------------------------------------------------------------------------------------

def term_labels(ontology: Ontology, parts: tuple[str, ...] = PARTS
                ) -> tuple[list[str], str, list[tuple[int, int, int]], list[str]]:
    """``(ids, aspects, rows, texts)`` of the live terms: per vector its term number (into ``ids``), label and scope
    code, and the text to embed. ``aspects`` holds one character per term (P, F, C or -). A synonym whose text is
    its term's name (case and spacing aside) is left out: its vector would be the name's."""
    cols = ontology.columns
    ids: list[str] = []
    aspects: list[str] = []
    rows: list[tuple[int, int, int]] = []
    texts: list[str] = []
    for i, tid in enumerate(cols["ids"]):
        if cols["obsolete"][i]:
            continue
        t = len(ids)
        ids.append(tid)
        ns = cols["namespaces"][i] or ""
        aspects.append({"biological_process": "P", "molecular_function": "F", "cellular_component": "C"}.get(ns, "-"))
        name = " ".join(cols["names"][i].split())
        if "name" in parts and name:
            rows.append((t, 0, 0))
            texts.append(name)
        if "synonyms" in parts:
            for k, (text, scope) in enumerate(cols["synonyms"][i], start=1):
                text = " ".join(text.split())
                if text and text.lower() != name.lower():
                    rows.append((t, k, SCOPES.index(scope) if scope in SCOPES else SCOPES.index("RELATED")))
                    texts.append(text)
        definition = " ".join(cols["defs"][i].split())
        if "definition" in parts and definition:
            rows.append((t, DEFINITION, len(SCOPES) - 1))
            texts.append(definition)
    return ids, "".join(aspects), rows, texts


def labels_digest(ontology: Ontology) -> str:
    """A digest of what a dense term index embeds from ``ontology`` (live ids, names, synonyms with scopes,
    definitions): equal digests, equal vectors. The service compares the served ontology's with the manifest's."""
    cols = ontology.columns
    h = hashlib.sha256(f"{ontology.name}\x00".encode())
    for i, tid in enumerate(cols["ids"]):
        if not cols["obsolete"][i]:
            syns = "\x01".join(f"{t}\x02{s}" for t, s in cols["synonyms"][i])
            h.update(f"{tid}\x00{cols['names'][i]}\x00{cols['namespaces'][i] or ''}\x00{syns}\x00"
                     f"{cols['defs'][i]}\x03".encode())
    return h.hexdigest()[:32]


def paths(data_dir: Path, name: str) -> tuple[Path, Path, Path]:
    """The vectors, labels and manifest files of ontology ``name`` (a checked name, never a path)."""
    d = Path(data_dir) / "ontologies"
    name = check_ontology(name)
    return d / (name + VECTORS_FILE), d / (name + LABELS_FILE), d / (name + MANIFEST_FILE)


# ---- building ----------------------------------------------------------------------------------------------------

Embedder = Callable[[list[str]], Any]


def _encoder(name: str, backend: str, device: str, dtype: str, cache_dir: Path | None) -> Any:
    """The passage index's encoder, loaded without transformers' "Loading weights" bar (a line on every piped
    ``flysift index ontology`` and in a server's log)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return load_encoder(name, backend, device, dtype, cache_dir)


def _batches(texts: list[str], order: list[int]) -> Iterator[list[str]]:
    for k in range(0, len(order), BATCH):
        yield [texts[j] for j in order[k:k + BATCH]]


def build(data_dir: Path | str, ontology: Ontology, *, parts: tuple[str, ...] = PARTS, device: str | None = None,
          backend: str | None = None, embedder: Embedder | None = None,
          progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Embed ``ontology``'s live terms and write its dense term index into ``<data_dir>/ontologies``; returns the
    manifest. The encoder is the passage index's choice (:func:`resolve_encoder`: ONNX Runtime int8 on a CPU);
    ``embedder`` replaces it (texts → unit float32 rows; a benchmark's cache), and the manifest then records the
    configured model and CPU backend it stands for. Texts are embedded in length-sorted batches (less padding)."""
    data_dir = Path(data_dir)
    vec_path, lab_path, man_path = paths(data_dir, ontology.name)
    kind_backend, kind_device, dtype = resolve_encoder(device, backend)
    name = model_name()
    ids, aspects, rows, texts = term_labels(ontology, parts)
    t0, c0 = time.perf_counter(), time.process_time()
    if embedder is None:
        encoder = _encoder(name, kind_backend, kind_device, dtype, data_dir)
        dim = encoder.dim
        order = sorted(range(len(texts)), key=lambda j: len(texts[j]))
        vectors = np.zeros((len(texts), dim), dtype=np.float16)
        done = 0
        for vecs in encoder.stream(_batches(texts, order)):
            vectors[order[done:done + len(vecs)]] = vecs
            done += len(vecs)
            if progress:
                progress(done, len(texts))
    else:
        got = np.asarray(embedder(texts), dtype=np.float32) if texts else np.zeros((0, 0), np.float32)
        dim = int(got.shape[1]) if texts else int(_encoder(name, kind_backend, kind_device, dtype, data_dir).dim)
        vectors = got.astype(np.float16)
        if progress:
            progress(len(texts), len(texts))
    labels = np.asarray(rows, dtype=np.int32).reshape(len(rows), 3)
    counts = {"name": int((labels[:, 1] == 0).sum()), "synonym": int((labels[:, 1] > 0).sum()),
              "definition": int((labels[:, 1] == DEFINITION).sum())}
    manifest = {"format": FORMAT, "ontology": ontology.name, "version": labels_digest(ontology), "model": name,
                "backend": kind_backend, "device": kind_device, "dtype": dtype, "dim": dim, "store": "float16",
                "vectors": len(texts), "terms": len(ids), "counts": counts, "parts": list(parts),
                "seconds": round(time.perf_counter() - t0, 3), "cpu_seconds": round(time.process_time() - c0, 3),
                "ids": ids, "aspects": aspects}
    vec_path.parent.mkdir(parents=True, exist_ok=True)
    man_path.unlink(missing_ok=True)   # readers see no index while the arrays are replaced, never a mixed one
    _save_npy(vec_path, vectors)
    _save_npy(lab_path, labels)
    _write_atomic(man_path, json.dumps(manifest).encode())
    return {k: v for k, v in manifest.items() if k not in ("ids", "aspects")}


def _save_npy(path: Path, array: np.ndarray) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.save(fh, array, allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---- serving -----------------------------------------------------------------------------------------------------

class DenseTerms:
    """One ontology's dense term index in memory (vectors as float32 for BLAS: GO's ~195,000 take ~300 MB)."""

    def __init__(self, manifest: dict[str, Any], vectors: np.ndarray, labels: np.ndarray):
        self.manifest = manifest
        self.ids: list[str] = manifest["ids"]
        self.aspects: str = manifest["aspects"]
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.terms = np.ascontiguousarray(labels[:, 0])
        self.labels = np.ascontiguousarray(labels[:, 1])

    @classmethod
    def read(cls, data_dir: Path, name: str) -> DenseTerms:
        """What :func:`build` wrote, checked; ``ValueError`` naming the file and the check that failed."""
        vec_path, lab_path, man_path = paths(data_dir, name)
        try:
            if man_path.stat().st_size > MAX_MANIFEST_BYTES:
                raise ValueError(f"{man_path.name}: larger than {MAX_MANIFEST_BYTES} bytes")
            manifest = json.loads(man_path.read_bytes())
            vectors = np.load(vec_path, allow_pickle=False)
            labels = np.load(lab_path, allow_pickle=False)
        except (OSError, EOFError, UnicodeDecodeError, RecursionError, ValueError) as e:
            raise ValueError(f"{man_path.name}: unreadable ({type(e).__name__}: {str(e)[:150]})") from None
        _check(manifest, vectors, labels, name)
        return cls(manifest, vectors, labels)

    def nearest(self, vector: np.ndarray, k: int, *, exclude: set[str] | frozenset[str] = frozenset(),
                aspect: str | None = None) -> list[Nearest]:
        """The ``k`` terms whose best vector is nearest to ``vector`` (unit length), best first, leaving out
        ``exclude`` and, with ``aspect``, terms of other aspects. Reads the top vectors and widens until ``k``
        distinct allowed terms are found or every vector has been read."""
        scores = dot_rows(self.vectors, vector)

        def top(want: int) -> tuple[np.ndarray, np.ndarray]:
            rows = top_rows(scores, want)
            return rows, scores[rows]
        return nearest_terms(top, len(self.vectors), k, 4 * k, term_of=self.terms, label_of=self.labels,
                             ids=self.ids, aspects=self.aspects, exclude=exclude, aspect=aspect)


def _check(m: Any, vectors: np.ndarray, labels: np.ndarray, name: str) -> None:
    """The manifest's shape and its agreement with the arrays; ``ValueError`` saying what does not fit."""
    fields = {"format": int, "ontology": str, "version": str, "model": str, "backend": str, "dtype": str,
              "dim": int, "vectors": int, "terms": int, "ids": list, "aspects": str, "counts": dict}
    if not isinstance(m, dict) or any(not isinstance(m.get(k), t) for k, t in fields.items()):
        raise ValueError("manifest: missing or mistyped fields")
    if m["format"] != FORMAT or m["ontology"] != name:
        raise ValueError(f"manifest: format {m['format']} of {str(m['ontology'])[:40]!r}, expected {FORMAT} of "
                         f"{name!r}")
    if len(m["ids"]) != m["terms"] or len(m["aspects"]) != m["terms"] or \
            not all(isinstance(i, str) for i in m["ids"]):
        raise ValueError("manifest: ids or aspects do not match its term count")
    if vectors.dtype not in (np.float16, np.float32) or vectors.ndim != 2 or \
            vectors.shape != (m["vectors"], m["dim"]):
        raise ValueError(f"vectors {vectors.dtype} {vectors.shape}, manifest says {m['vectors']} × {m['dim']}")
    if labels.dtype != np.int32 or labels.shape != (m["vectors"], 3):
        raise ValueError(f"labels {labels.dtype} {labels.shape}, manifest says {m['vectors']} × 3")
    if labels.size and (labels[:, 0].min() < 0 or labels[:, 0].max() >= m["terms"] or labels[:, 1].min() < DEFINITION
                        or labels[:, 2].min() < 0 or labels[:, 2].max() >= len(SCOPES)):
        raise ValueError("labels: a term number, label or scope out of range")
    if vectors.size and not np.isfinite(vectors).all():
        raise ValueError("vectors: not finite")


def how_to_build(name: str) -> str:
    return (f"build it with `flysift index ontology FILE --name {name} --dense` (needs the dense extra: "
            "pip install 'flysift[dense]')")


class DenseTermIndexes:
    """The dense term indexes of a data dir, loaded on first use and again when the files or the served ontology
    change (a stat per call). An index that does not fit (another model, another version of the ontology, a damaged
    file) is logged once per change of the files and answered as unavailable."""

    def __init__(self, data_dir: Path | str):
        self.data_dir = Path(data_dir)
        self._loaded: ReloadingCache[DenseTerms | str] = ReloadingCache()
        self._queries: dict[tuple[str, ...], QueryVectors] = {}

    def get(self, name: str, ontology: Callable[[], Ontology], ontology_key: Any) -> DenseTerms:
        """The index of ``name``, checked against the served ontology (``ontology()``, whose identity is
        ``ontology_key``, e.g. its file's mtime); :class:`DenseUnavailable` saying why and how to build it."""
        vec_path, lab_path, man_path = paths(self.data_dir, name)
        try:
            stats = tuple((st.st_mtime_ns, st.st_ino, st.st_size) for st in (p.stat() for p in
                                                                              (man_path, vec_path, lab_path)))
        except OSError:
            raise DenseUnavailable(f"Ontology {name!r} has no dense term index: {how_to_build(name)}.",
                                   details={"ontology": name}) from None
        got = self._loaded.get(name, (stats, ontology_key), lambda: self._load(name, ontology))
        if isinstance(got, str):
            raise DenseUnavailable(f"The dense term index of {name!r} is not used: {got}; {how_to_build(name)}.",
                                   details={"ontology": name})
        return got

    def _load(self, name: str, ontology: Callable[[], Ontology]) -> DenseTerms | str:
        try:
            index = DenseTerms.read(self.data_dir, name)
        except ValueError as e:
            why = str(e)[:200]
        else:
            m = index.manifest
            try:
                current = model_name()
            except DenseUnavailable as e:
                current = f"none ({e.message[:80]})"
            if m["model"] != current:
                why = f"built with model {m['model'][-80:]!r}, the configured one is {current[-80:]!r}"
            elif m["version"] != labels_digest(ontology()):
                why = "built from another version of the ontology (its labels digest differs)"
            else:
                return index
        log.warning("dense term index of %s ignored: %s", name, why)
        return why

    def query_vector(self, index: DenseTerms, text: str) -> np.ndarray:
        """``text`` embedded by the index's model on the index's backend (as passage queries are), through the
        query helper the term encoder shares (search.ontology.query_vectors: unit float32, the latest cached)."""
        m = index.manifest
        try:
            backend, device, dtype = resolve_encoder("cpu" if m["backend"] != "torch" else None, m["backend"])
        except DenseUnavailable as e:
            raise DenseUnavailable(f"The dense term index of {m['ontology']!r} was built with backend "
                                   f"{m['backend'][:40]!r}, which cannot run here: {e.message[:200]}",
                                   details={"ontology": m["ontology"]}) from None
        dtype = "float32" if backend == "torch" else dtype
        key = (m["model"], backend, device, dtype)
        queries = self._queries.get(key)
        if queries is None:
            encoder = _encoder(m["model"], backend, device, dtype, self.data_dir if backend != "torch" else None)
            queries = self._queries.setdefault(key, QueryVectors(lambda texts: embed(encoder, texts)))
        return queries(text)

    def search(self, engine: TermEngine, name: str, query: str, limit: int, filters: dict[str, Any], mode: str, *,
               lexical: Callable[[int], LexicalRanking], ontology: Callable[[], Ontology],
               ontology_key: Any) -> list[TermHit]:
        """Term search in ``mode`` dense (the nearest terms, scored by cosine) or hybrid (RRF of the lexical ranking,
        ``lexical(depth)``, and the dense one). The filters (aspect, hidden ids) apply to both sides; the dense index
        holds live terms only. Hits come from the lexical side or the engine (search.ontology.ranking.hits_of)."""
        index = self.get(name, ontology, ontology_key)
        dense = index.nearest(self.query_vector(index, query), limit if mode == "dense" else DENSE_POOL,
                              exclude=filters.get("exclude_ids") or frozenset(), aspect=filters.get("aspect"))
        if mode == "dense":
            return hits_of([(d.id, d.score) for d in dense], None, engine, name, query)
        lex = lexical(max(limit, LEXICAL_DEPTH))
        return hits_of(fuse(lex.ids, dense, limit), lex, engine, name, query)


def fuse(lexical: list[str], dense: list[Nearest], limit: int, k: int = TERM_RRF_K,
         dense_weight: float = DENSE_WEIGHT) -> list[tuple[str, float]]:
    """The best ``limit`` of the RRF of the lexical ranking's ids and the dense terms: ``(id, 1/(k + lexical rank) +
    dense_weight/(k + dense rank))``; ties keep the lexical order first. A weight of 1 is plain RRF."""
    if dense_weight == 1.0:
        return rrf([lexical, [d.id for d in dense]], k)[:limit]
    scores: dict[str, float] = {}
    for weight, ranking in ((1.0, lexical), (dense_weight, [d.id for d in dense])):
        for rank, key in enumerate(dict.fromkeys(ranking), start=1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    order = {key: i for i, key in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))[:limit]
