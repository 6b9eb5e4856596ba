"""Serving the term encoder: the int8 ONNX query encoder, each ontology's label vectors, nearest terms.

What a search costs on top of the lexical ranking: one ONNX Runtime call for the query (word pieces from the model's
own ``tokenizer.json`` by ``tokenizers``; no torch, no sentence-transformers in the server), then the nearest labels:
one matrix product for an ontology of up to :data:`~.artefact.EXACT_MAX` labels (FBbt, FBdv), an HNSW graph above
(GO), and the best label's cosine per term. The version checks (:class:`TermEncoders`) happen once per change of the
artefact or of the served ontology: an encoder whose vectors were made from other labels than the served ones is
refused with one line saying which versions differ and how to retrain.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from search.core.extras import ExtraMissing, require
from search.engines.dense import DenseUnavailable
from search.ontology.encoder import artefact
from search.ontology.encoder.labels import LabelTable
from search.ontology.loaded import ReloadingCache
from search.ontology.model import Ontology
from search.ontology.query_vectors import Nearest, QueryVectors, dot_rows, nearest_terms, top_rows, unit_rows

log = logging.getLogger(__name__)

#: HNSW search depth (candidates kept while walking the graph): how many of the exact product's top 5 terms the
#: graph finds is measured by bench/bench_ontology.py --encoder (docs/ontologies.md)
HNSW_EF_SEARCH = 128
HNSW_M = 32
#: texts per ONNX call when embedding labels in bulk
BATCH = 128
MAX_IDS_BYTES = 64 << 20


def retrain_hint(data_dir: Path | str | None = None) -> str:
    where = f" --data-dir {data_dir}" if data_dir is not None else ""
    return f"retrain it with `flysift train term-encoder{where}`"


class QueryEncoder:
    """The artefact's int8 ONNX graph with the model's tokenizer: texts → unit float32 rows."""

    def __init__(self, onnx_path: Path, tokenizer_path: Path, max_seq_length: int, threads: int = 1):
        ort = require("onnxruntime", "dense", "The term encoder")
        tokenizers = require("tokenizers", "dense", "The term encoder")
        self.tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        self.tokenizer.enable_truncation(max_seq_length)
        pad = self.tokenizer.token_to_id("[PAD]")
        self.tokenizer.enable_padding(pad_id=0 if pad is None else pad, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")   # spinning burns shared cores
        self.session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self._lock = threading.Lock()   # the tokenizer's padding and truncation state is shared
        #: a query's vector, the latest ones cached (search.ontology.query_vectors: the helper the dense term
        #: index shares)
        self.query = QueryVectors(self.encode)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit float32 rows of ``texts`` (padded to the longest of them, never to the maximum length)."""
        if len(texts) == 1:   # a query: no batch, no padding, no lock (the tokenizer's settings are only read)
            e = self.tokenizer.encode(texts[0])
            return unit_rows(self._run(np.asarray([e.ids], dtype=np.int64),
                                       np.asarray([e.attention_mask], dtype=np.int64),
                                       np.asarray([e.type_ids], dtype=np.int64)))
        with self._lock:
            enc = self.tokenizer.encode_batch(texts)
        return unit_rows(self._run(np.asarray([e.ids for e in enc], dtype=np.int64),
                                   np.asarray([e.attention_mask for e in enc], dtype=np.int64),
                                   np.asarray([e.type_ids for e in enc], dtype=np.int64)))

    def _run(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return self.session.run(None, {k: feed[k] for k in self.inputs})[0]

    def encode_many(self, texts: list[str], progress: Callable[[int, int], None] | None = None,
                    batch: int = BATCH) -> np.ndarray:
        """Many texts in length-sorted batches (less padding); rows in the order given."""
        order = sorted(range(len(texts)), key=lambda j: len(texts[j]))
        dim = self.session.get_outputs()[0].shape[-1]
        out = np.zeros((len(texts), dim if isinstance(dim, int) else 0), dtype=np.float32)
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            vecs = self.encode([texts[j] for j in idx])
            if out.shape[1] != vecs.shape[1]:
                out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float32)
            out[idx] = vecs
            if progress:
                progress(min(s + batch, len(order)), len(order))
        return out


@lru_cache(maxsize=4)
def query_encoder(folder: Path, max_seq_length: int) -> QueryEncoder:
    """One query encoder per artefact version and process."""
    return QueryEncoder(folder / artefact.ONNX_FILE, folder / artefact.MODEL_DIR / "tokenizer.json", max_seq_length,
                        threads=int(os.environ.get("FLYSIFT_ENCODER_THREADS", "1")))


class LabelVectors:
    """One ontology's label vectors: the rows of :class:`LabelTable` as unit vectors, each row's term and k, and
    (above EXACT_MAX labels) an HNSW graph over them."""

    def __init__(self, ids: list[str], aspects: str, rows: np.ndarray, vectors: np.ndarray, hnsw: Any = None):
        self.ids = ids
        self.aspects = aspects
        self.term = np.ascontiguousarray(rows[:, 0])
        self.k = np.ascontiguousarray(rows[:, 1])
        self.hnsw = hnsw
        # exact search multiplies float32 (BLAS); a graph reads its own copy, the rows stay float16 for cosines
        self.vectors = vectors if hnsw is not None else np.ascontiguousarray(vectors, dtype=np.float32)
        counts = np.bincount(self.term, minlength=len(ids))
        self.start = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self.index = {tid: n for n, tid in enumerate(ids)}

    @classmethod
    def read(cls, folder: Path, name: str, entry: artefact.OntologyEntry, dim: int, *, exact: bool = False
             ) -> LabelVectors:
        """The vector files of ``name`` in a version folder, checked against the manifest's entry; ``ValueError``
        naming the file and what does not fit. ``exact`` skips the graph (one matrix product per query)."""
        paths = artefact.vector_paths(folder, name)
        try:
            if paths["ids"].stat().st_size > MAX_IDS_BYTES:
                raise ValueError(f"{paths['ids'].name}: larger than {MAX_IDS_BYTES} bytes")
            meta = json.loads(paths["ids"].read_bytes())
            vectors = np.load(paths["vectors"], allow_pickle=False, mmap_mode="r")
            rows = np.load(paths["rows"], allow_pickle=False)
        except (OSError, EOFError, UnicodeDecodeError, RecursionError, ValueError) as e:
            raise ValueError(f"{name}: vector files unreadable ({type(e).__name__}: {str(e)[:150]})") from None
        ids, aspects = (meta.get("ids"), meta.get("aspects")) if isinstance(meta, dict) else (None, None)
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or not isinstance(aspects, str) \
                or len(ids) != entry.terms or len(aspects) != entry.terms:
            raise ValueError(f"{paths['ids'].name}: ids or aspects do not match the manifest's {entry.terms} terms")
        if vectors.dtype != np.float16 or vectors.shape != (entry.labels, dim):
            raise ValueError(f"{paths['vectors'].name}: {vectors.dtype} {vectors.shape}, the manifest says "
                             f"{entry.labels} × {dim} float16")
        if rows.dtype != np.int32 or rows.shape != (entry.labels, 2):
            raise ValueError(f"{paths['rows'].name}: {rows.dtype} {rows.shape}, the manifest says {entry.labels} × 2")
        if rows.size and (rows[:, 0].min() < 0 or rows[:, 0].max() >= entry.terms or rows[:, 1].min() < 0
                          or (np.diff(rows[:, 0]) < 0).any()):
            raise ValueError(f"{paths['rows'].name}: a term number out of range or out of order")
        hnsw = None
        if entry.index == "hnsw" and not exact:
            faiss = require("faiss", "dense", "The term encoder's HNSW graph")
            try:   # the vectors memory-mapped, not read: a CLI call starts in milliseconds, workers share the pages
                hnsw = faiss.read_index(str(paths["hnsw"]), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
            except (RuntimeError, OSError) as e:
                raise ValueError(f"{paths['hnsw'].name}: unreadable ({str(e)[:150]})") from None
            if hnsw.ntotal != entry.labels or hnsw.d != dim:
                raise ValueError(f"{paths['hnsw'].name}: {hnsw.ntotal} × {hnsw.d}, the manifest says "
                                 f"{entry.labels} × {dim}")
            hnsw.hnsw.efSearch = HNSW_EF_SEARCH
        elif vectors.size and not np.isfinite(np.asarray(vectors[: min(len(vectors), 4096)])).all():
            raise ValueError(f"{paths['vectors'].name}: not finite")
        return cls(ids, aspects, rows, vectors, hnsw)

    # ---- search ------------------------------------------------------------------------------------------------
    def _top_rows(self, vector: np.ndarray, want: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``want`` nearest label rows and their cosines, best first."""
        n = len(self.term)
        want = min(want, n)
        if self.hnsw is not None:
            scores, rows = self.hnsw.search(np.asarray(vector, dtype=np.float32).reshape(1, -1), want)
            keep = rows[0] >= 0
            return rows[0][keep].astype(np.int64), scores[0][keep]
        scores = dot_rows(self.vectors, vector)
        top = top_rows(scores, want)
        return top, scores[top]

    def nearest(self, vector: np.ndarray, k: int, *, exclude: set[str] | frozenset[str] = frozenset(),
                aspect: str | None = None) -> list[Nearest]:
        """The ``k`` terms whose best label is nearest to ``vector`` (unit length), best first, leaving out
        ``exclude`` and, with ``aspect``, terms of other aspects (an aspect reads four times deeper at first)."""
        return nearest_terms(lambda want: self._top_rows(vector, want), len(self.term), k,
                             4 * k if not aspect else 16 * k, term_of=self.term, label_of=self.k, ids=self.ids,
                             aspects=self.aspects, exclude=exclude, aspect=aspect)

    def cosines(self, vector: np.ndarray, term_ids: list[str]) -> dict[str, tuple[float, int]]:
        """The best label's cosine (and that label's k) of each of ``term_ids`` this ontology knows: their label
        rows gathered and multiplied at once (one product, not one per term)."""
        terms = [(tid, self.index[tid]) for tid in term_ids if tid in self.index]
        terms = [(tid, t) for tid, t in terms if self.start[t + 1] > self.start[t]]
        if not terms:
            return {}
        starts = np.asarray([self.start[t] for _, t in terms], dtype=np.int64)
        counts = np.asarray([self.start[t + 1] for _, t in terms], dtype=np.int64) - starts
        offsets = np.concatenate(([0], np.cumsum(counts)[:-1]))
        rows = np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        scores = dot_rows(np.asarray(self.vectors[rows], dtype=np.float32), vector)
        out: dict[str, tuple[float, int]] = {}
        for (tid, _), a, n in zip(terms, offsets.tolist(), counts.tolist(), strict=True):
            j = a + int(np.argmax(scores[a:a + n]))
            out[tid] = (float(scores[j]), int(self.k[rows[j]]))
        return out


def build_hnsw(vectors: np.ndarray, path: Path) -> None:
    """An HNSW graph (inner product) over unit ``vectors``, written to ``path`` (FAISS's own format)."""
    faiss = require("faiss", "dense", "The term encoder's HNSW graph")
    index = faiss.IndexHNSWFlat(vectors.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 80
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, path)


def write_vectors(folder: Path, table: LabelTable, vectors: np.ndarray, hnsw: bool | None = None) -> dict[str, Any]:
    """Write one ontology's label vectors into a version folder, in the layout :meth:`LabelVectors.read` reads (an
    HNSW graph too above EXACT_MAX labels, or as ``hnsw`` says); returns its manifest entry."""
    paths = artefact.vector_paths(folder, table.ontology)
    paths["vectors"].parent.mkdir(exist_ok=True)
    np.save(paths["vectors"], vectors.astype(np.float16), allow_pickle=False)
    np.save(paths["rows"], np.asarray([table.term, table.k], dtype=np.int32).T.reshape(-1, 2), allow_pickle=False)
    paths["ids"].write_text(json.dumps({"ids": table.ids, "aspects": table.aspects}))
    graph = len(table.texts) > artefact.EXACT_MAX if hnsw is None else hnsw
    if graph:
        build_hnsw(vectors, paths["hnsw"])
    return {"data_version": table.data_version, "digest": table.digest, "terms": len(table.ids),
            "labels": len(table.texts), "index": "hnsw" if graph else "exact"}


@dataclass
class Loaded:
    """One ontology's encoder, ready to search: the version folder, its manifest, encoder and vectors."""

    version: str
    folder: Path
    manifest: artefact.Manifest
    vectors: LabelVectors

    @property
    def encoder(self) -> QueryEncoder:
        return query_encoder(self.folder, self.manifest.max_seq_length)


class TermEncoders:
    """The data dir's term encoder, per ontology: loaded on first use and again when CURRENT, the version's
    manifest or the served ontology change (a ``stat`` per call). An encoder that does not fit (trained on other
    labels, damaged files, the extra missing) is logged once per change and answered as unavailable."""

    def __init__(self, data_dir: Path | str, *, exact: bool = False):
        self.data_dir = Path(data_dir)
        self.exact = exact
        self._loaded: ReloadingCache[Loaded | str] = ReloadingCache()

    def _key(self) -> tuple[Any, ...] | None:
        try:
            st = (artefact.root(self.data_dir) / artefact.CURRENT).stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_ino, st.st_size)

    def get(self, name: str, ontology: Callable[[], Ontology], ontology_key: Any) -> Loaded:
        """The encoder for ontology ``name``, checked against the served ontology (``ontology()``, whose identity
        is ``ontology_key``); :class:`DenseUnavailable` (409) saying why, in one line."""
        key = self._key()
        if key is None:
            raise DenseUnavailable(f"No term encoder in this data dir for {name!r}: train one with `flysift train "
                                   "term-encoder` (needs the dense extra: pip install 'flysift[dense]').",
                                   details={"ontology": name})
        got = self._loaded.get(name, (key, ontology_key), lambda: self._load(name, ontology))
        if isinstance(got, str):
            raise DenseUnavailable(got, details={"ontology": name})
        return got

    def usable(self, name: str, ontology: Callable[[], Ontology], ontology_key: Any) -> bool:
        """Whether :meth:`get` would answer (the default mode is hybrid only then)."""
        try:
            self.get(name, ontology, ontology_key)
        except DenseUnavailable:
            return False
        return True

    def _load(self, name: str, ontology: Callable[[], Ontology]) -> Loaded | str:
        why = self._check(name, ontology)
        if isinstance(why, Loaded):
            return why
        log.warning("term encoder not used for %s: %s", name, why)
        return why

    def _check(self, name: str, ontology: Callable[[], Ontology]) -> Loaded | str:
        try:
            version = artefact.current_version(self.data_dir)
            if version is None:
                return f"No term encoder in this data dir: {retrain_hint()}."
            folder = artefact.version_dir(self.data_dir, version)
            manifest, _ = artefact.read_manifest(folder)
        except ValueError as e:
            return f"The term encoder cannot be read ({str(e)[:200]}): {retrain_hint()}."
        entry = manifest.ontologies.get(name)
        if entry is None:
            trained = ", ".join(sorted(manifest.ontologies)) or "none"
            return (f"The term encoder {version} was not trained with ontology {name!r} (trained with: "
                    f"{trained[:80]}): index it, then {retrain_hint()}.")
        served = ontology()
        digest = _digest(served)
        if digest != entry.digest:
            return (f"The term encoder {version} was trained on {name} {str(entry.data_version)[:60]} (labels "
                    f"{entry.digest[:8]}), but the served {name} is {str(served.data_version)[:60]} (labels "
                    f"{digest[:8]}): {retrain_hint()}.")
        try:
            require("onnxruntime", "dense", "The term encoder")
            vectors = LabelVectors.read(folder, name, entry, manifest.dim, exact=self.exact)
        except ValueError as e:
            return f"The term encoder {version} of {name!r} is damaged ({str(e)[:200]}): {retrain_hint()}."
        except ExtraMissing as e:
            return f"The term encoder {version} cannot run here: {e.message[:200]}"
        return Loaded(version, folder, manifest, vectors)


_DIGESTS: dict[int, tuple[Ontology, str]] = {}


def _digest(ontology: Ontology) -> str:
    """The served ontology's label digest, computed once per loaded ontology object (~0.2 s for GO)."""
    got = _DIGESTS.get(id(ontology))
    if got is None or got[0] is not ontology:
        got = (ontology, LabelTable.of(ontology).digest)
        if len(_DIGESTS) > 16:
            _DIGESTS.clear()
        _DIGESTS[id(ontology)] = got
    return got[1]
