"""Dense search over an engine's own vector store (``Engine.vector_store``: the cluster's k-NN), with the same
encoder, texts, filters and paper ranking as the FAISS index of ``search.engines.dense``, so that the
service fuses dense and BM25 lists the same way whichever engine holds the vectors.

``build_vectors`` embeds every passage of the published build (title + passage, batches sorted by length, the
encoder ``resolve_encoder`` picks) and writes the vectors through the store's writer, a checkpoint every ``CHUNK``
passages at a paper boundary (the store resumes an interrupted run of the same build and model). ``EngineDenseIndex``
answers ``search`` and ``search_papers`` as ``DenseIndex`` does: a query is embedded with the model and backend the
vectors were made with.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from search.core.errors import DenseUnavailable, FlysiftError, IndexMissing, LimitExceeded
from search.core.names import DEFAULT_COLLECTION
from search.core.query import Filters
from search.engines import Engine, VectorStore
from search.engines.dense import (
    CHUNK,
    _passages,
    _require_extra,
    _threads,
    build_dense,
    default_batch_size,
    embed,
    load_encoder,
    model_name,
    query_encoder,
    resolve_encoder,
)


def build_any(engine: Engine, data_dir: Path | str, **kw: Any) -> dict[str, Any]:
    """The dense index of ``engine``'s collection wherever the engine keeps it: ``build_vectors`` into its vector
    store, else ``build_dense``'s FAISS files beside its local build (same arguments, same meta); ``data_dir`` keeps
    the encoder's ONNX exports."""
    store = engine.vector_store()
    if store is None:
        return build_dense(engine, data_dir, **kw)
    return build_vectors(engine, store, engine.collection, data_dir, **kw)


Row = tuple[str, str, str, int | None, list[str]]


def _rows(engine: Engine) -> Iterator[tuple[Row, str]]:
    """``((passage_id, pmcid, section_type, year, the paper's section types), text)`` for every published passage,
    in the scan's order (the embedded build's order: the same windows and batches give the same vectors). A paper's
    section types need all its passages: the scan keeps them together, and a paper read ahead is held back."""
    group: list[tuple[list[Any], str]] = []
    seen: set[str] = set()

    def out() -> Iterator[tuple[Row, str]]:
        sections = sorted({r[2] for r, _ in group})
        for r, t in group:
            yield (r[0], r[1], r[2], r[3], sections), t

    for row, text in _passages(engine):
        if group and group[0][0][1] != row[1]:
            yield from out()
            group = []
        if not group:
            if row[1] in seen:
                raise FlysiftError(f"The passages of {row[1]} do not come together in the engine's scan; dense "
                                   "vectors cannot carry their paper's sections.", code="dense_corrupt", status=500)
            seen.add(row[1])
        group.append((row, text))
    if group:
        yield from out()


def _passages_to_embed(engine: Engine, collection: str, batch_size: int | None, max_passages: int | None) -> int:
    """The published build's passage count, once the arguments and the build are checked."""
    if batch_size is not None and batch_size < 1:
        raise LimitExceeded(f"batch_size must be positive (got {batch_size}).", details={"field": "batch_size"})
    total = engine.stats().passages
    if total == 0 and not engine.has_index():
        raise IndexMissing(f"Collection {collection!r} has no published build: run `flysift index corpus …` first.")
    if max_passages is not None and total > max_passages:
        raise LimitExceeded(f"Collection {collection!r} has {total} passages; building its dense index here is "
                            f"limited to {max_passages}: run `flysift index dense --collection {collection}` instead.",
                            details={"passages": total, "max": max_passages})
    return total


def build_vectors(engine: Engine, store: VectorStore, collection: str, data_dir: Path | str, *,
                  batch_size: int | None = None, progress: Callable[[int, int], None] | None = None,
                  model: str | None = None, resume: bool = True, max_passages: int | None = None,
                  device: str | None = None, backend: str | None = None,
                  announce: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Embed every published passage of ``engine`` into ``store``; the arguments and the returned meta are those of
    ``search.engines.dense.build_dense``."""
    import numpy as np

    _require_extra()
    kind_backend, kind_device, dtype = resolve_encoder(device, backend)
    total = _passages_to_embed(engine, collection, batch_size, max_passages)
    name = model or model_name()
    t0, cpu0 = time.perf_counter(), time.process_time()
    encoder = load_encoder(name, kind_backend, kind_device, dtype, Path(data_dir))
    load_s, t1, cpu1 = time.perf_counter() - t0, time.perf_counter(), time.process_time()
    size = batch_size or default_batch_size(kind_device)
    if announce:
        announce({**encoder.describe(), "batch_size": size, "threads": _threads()})
    writer = store.writer({"model": name, "dim": encoder.dim, "backend": kind_backend, "dtype": dtype},
                          resume=resume)
    resumed = writer.done
    window = max(CHUNK, size)   # as build_dense: windows sorted by length into batches, one checkpoint each
    windows: list[tuple[list[Row], list[int]]] = []   # per window: its rows and the passage order of its batches

    def cut(rows: list[Row], texts: list[str]) -> Iterator[list[str]]:
        order = sorted(range(len(texts)), key=lambda j: len(texts[j]))
        windows.append((rows, order))
        for k in range(0, len(order), size):
            yield [texts[j] for j in order[k:k + size]]

    def batches() -> Iterator[list[str]]:
        rows: list[Row] = []
        texts: list[str] = []
        for i, (row, text) in enumerate(_rows(engine)):
            if i < resumed:
                continue
            rows.append(row)
            texts.append(text)
            if len(texts) >= window:
                yield from cut(rows, texts)
                rows, texts = [], []
        if texts:
            yield from cut(rows, texts)

    done, embedded, filled = resumed, 0, 0
    out: Any = None
    for vecs in encoder.stream(batches()):
        if out is None:
            out, filled = np.empty((len(windows[0][1]), encoder.dim), dtype=np.float32), 0
        out[windows[0][1][filled:filled + len(vecs)]] = vecs
        filled += len(vecs)
        embedded += len(vecs)
        if filled == len(out):   # a whole window: written, then checkpointed
            rows, _ = windows.pop(0)
            writer.write(rows, out)
            done += len(rows)
            writer.checkpoint(done)
            out = None
        if progress:
            progress(resumed + embedded, total)
    embed_s, embed_cpu = time.perf_counter() - t1, time.process_time() - cpu1
    if done != total:
        raise FlysiftError(f"dense vectors of {collection!r}: {done} passages written for {total} published; "
                           "rerun with --no-resume.", code="dense_corrupt", status=500)
    meta = {"model": name, "dim": encoder.dim, "count": done, "index": "knn-hnsw-lucene", "collection": collection,
            **encoder.describe(), "threads": _threads(), "created": time.time(), "embedded": embedded,
            "resumed_from": resumed, "batch_size": size, "load_seconds": round(load_s, 3),
            "load_cpu_seconds": round(cpu1 - cpu0, 3), "embed_seconds": round(embed_s, 3),
            "embed_cpu_seconds": round(embed_cpu, 3), "seconds": round(time.perf_counter() - t0, 3),
            "passages_per_s": round(embedded / embed_s, 2) if embedded and embed_s > 0 else None}
    writer.publish(meta)
    return {**meta, "build": store.meta().get("build")}


class EngineDenseIndex:
    """``DenseIndex``'s interface over an engine's vector store."""

    def __init__(self, store: VectorStore, data_dir: Path | str, collection: str = DEFAULT_COLLECTION):
        self.store, self.data_dir, self.collection = store, Path(data_dir), collection

    def available(self) -> bool:
        try:
            self.store.meta()
        except (DenseUnavailable, IndexMissing):
            return False
        return True

    def meta(self) -> dict[str, Any]:
        return self.store.meta()

    def _query_vector(self, text: str) -> Any:
        return embed(query_encoder(self.data_dir, self.collection, self.store.meta()), [text])[0]

    def search(self, text: str, k: int, filters: Filters | None = None) -> list[tuple[str, str, float]]:
        """The ``k`` passages nearest to ``text``: ``(passage_id, pmcid, cosine)``, best first."""
        return self.store.search(self._query_vector(text), k, filters, paper_level=False)

    def search_papers(self, text: str, k: int, filters: Filters | None = None) -> list[tuple[str, float]]:
        """The ``k`` papers with the nearest passages, ``(pmcid, best passage cosine)``; widens the passage list
        until it holds ``k`` distinct papers or every allowed passage, as ``DenseIndex.search_papers`` does."""
        vector = self._query_vector(text)
        want = max(4 * k, 100)
        while True:
            hits = self.store.search(vector, want, filters, paper_level=True)
            best: dict[str, float] = {}
            for _pid, pmcid, score in hits:
                best.setdefault(pmcid, score)
            if len(best) >= k or len(hits) < want or want >= 10_000:
                return list(best.items())[:k]
            want = min(10_000, want * 4)
