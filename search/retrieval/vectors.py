"""Dense search over an engine's own vector store (``Engine.vector_store``: the cluster's k-NN), with the same
encoder, texts, filters and paper ranking as the embedded FAISS index of ``search.retrieval.dense``, so that the
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

from search.core.errors import FlysiftError, IndexMissing, LimitExceeded
from search.core.query import Filters
from search.engines import Engine, VectorStore
from search.retrieval.dense import (
    CHUNK,
    DenseUnavailable,
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


def build_any(data_dir: Path | str, collection: str, engine: Engine, **kw: Any) -> dict[str, Any]:
    """The collection's dense index wherever its engine keeps it: ``build_vectors`` into the engine's vector store,
    else ``build_dense``'s FAISS files beside the embedded build (same arguments, same meta)."""
    store = engine.vector_store()
    if store is None:
        return build_dense(data_dir, collection, engine=engine, **kw)
    return build_vectors(engine, store, collection, data_dir, **kw)


def _papers(engine: Engine, skip: int) -> Iterator[list[tuple[tuple[str, str, str, int | None], str]]]:
    """The published passages grouped by paper (the scan keeps a paper's passages together), after the first
    ``skip`` passages (whole papers: checkpoints fall between papers)."""
    group: list[tuple[tuple[str, str, str, int | None], str]] = []
    seen: set[str] = set()
    n = 0
    for row, text in _passages(engine):
        pid, pmcid, section, year = row
        if group and group[0][0][1] != pmcid:
            if n > skip:
                yield group
            group = []
        if not group:
            if pmcid in seen:
                raise FlysiftError(f"The passages of {pmcid} do not come together in the engine's scan; dense "
                                   "vectors cannot carry their paper's sections.", code="dense_corrupt", status=500)
            seen.add(pmcid)
        group.append(((pid, pmcid, section, year), text))
        n += 1
    if group and n > skip:
        yield group


def build_vectors(engine: Engine, store: VectorStore, collection: str, data_dir: Path | str, *,
                  batch_size: int | None = None, progress: Callable[[int, int], None] | None = None,
                  model: str | None = None, resume: bool = True, max_passages: int | None = None,
                  device: str | None = None, backend: str | None = None,
                  announce: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Embed every published passage of ``engine`` into ``store``; the arguments and the returned meta are those of
    ``search.retrieval.dense.build_dense``."""
    import numpy as np

    _require_extra()
    if batch_size is not None and batch_size < 1:
        raise LimitExceeded(f"batch_size must be positive (got {batch_size}).", details={"field": "batch_size"})
    kind_backend, kind_device, dtype = resolve_encoder(device, backend)
    total = engine.stats().passages
    if total == 0 and not engine.has_index():
        raise IndexMissing(f"Collection {collection!r} has no published build: run `flysift index corpus …` first.")
    if max_passages is not None and total > max_passages:
        raise LimitExceeded(f"Collection {collection!r} has {total} passages; building its dense index here is "
                            f"limited to {max_passages}: run `flysift index dense --collection {collection}` instead.",
                            details={"passages": total, "max": max_passages})
    name = model or model_name()
    t0, cpu0 = time.perf_counter(), time.process_time()
    encoder = load_encoder(name, kind_backend, kind_device, dtype, Path(data_dir))
    load_s, t1, cpu1 = time.perf_counter() - t0, time.perf_counter(), time.process_time()
    size = batch_size or default_batch_size(kind_device)
    if announce:
        announce({**encoder.describe(), "batch_size": size, "threads": _threads()})
    writer = store.writer({"model": name, "dim": encoder.dim, "backend": kind_backend, "dtype": dtype},
                          resume=resume)
    resumed = done = writer.done
    embedded = 0

    def flush(window: list[list[tuple[tuple[str, str, str, int | None], str]]]) -> None:
        nonlocal done, embedded
        rows = [(*r, sorted({s for (_, _, s, _), _ in paper})) for paper in window for r, _ in paper]
        texts = [t for paper in window for _, t in paper]
        order = sorted(range(len(texts)), key=lambda j: len(texts[j]))
        batches = (([texts[j] for j in order[k:k + size]]) for k in range(0, len(order), size))
        vectors = np.empty((len(texts), encoder.dim), dtype=np.float32)
        filled = 0
        for vecs in encoder.stream(batches):
            vectors[order[filled:filled + len(vecs)]] = vecs
            filled += len(vecs)
            if progress:
                progress(done + filled, total)
        writer.write(rows, vectors)
        done += len(texts)
        embedded += len(texts)
        writer.checkpoint(done)

    window: list[list[tuple[tuple[str, str, str, int | None], str]]] = []
    pending = 0
    for paper in _papers(engine, resumed):
        window.append(paper)
        pending += len(paper)
        if pending >= max(CHUNK, size):
            flush(window)
            window, pending = [], 0
    if window:
        flush(window)
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

    def __init__(self, store: VectorStore, data_dir: Path | str, collection: str = "default"):
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
