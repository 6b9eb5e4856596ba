"""Dense encoders side by side: passages/s and CPU seconds of each backend on the same passages, and the nDCG@10 each
gives on the IR collections (docs/dense.md has the numbers and the commands).

Throughput: the first ``--passages`` passages of an indexed collection (title + text, as ``flysift index dense``
embeds them), sorted by length into batches as the build does, through

- ``before``: sentence-transformers' ``encode`` per 64 consecutive passages (what the build did until issue #12),
- each ``--backends`` entry on ``--device``: tokenisation alone, the network alone on tokenised batches, and the two
  pipelined (the build's path); CPU seconds are the process's and its children's.

Cosines of each backend's vectors against torch float32's say how far they move. With ``--ir DIR`` each backend also
builds the dense index of every BEIR collection named in ``--ir-collections`` through an in-process service and
scores bm25, dense and hybrid runs (eval/ir.py), so the nDCG@10 change per backend is measured, not assumed.

usage: python bench/bench_dense.py --data-dir DATA [--collection default] [--passages 1000]
           [--backends torch,onnx,onnx-int8] [--device cpu] [--ir /path/to/ir --ir-collections med,cranfield]
           [--out result.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from search.core.names import DEFAULT_COLLECTION  # noqa: E402
from search.engines import dense, open_local  # noqa: E402


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (tokenizer and ONNX Runtime threads are the process's)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measured(fn: Any) -> tuple[Any, float, float]:
    t0, c0 = time.perf_counter(), cpu_seconds()
    out = fn()
    return out, time.perf_counter() - t0, cpu_seconds() - c0


def rate(n: int, seconds: float) -> float | None:
    return round(n / seconds, 1) if seconds > 0 else None


def sample(data_dir: Path, collection: str, n: int) -> list[str]:
    engine = open_local(data_dir, collection=collection)
    return [text for _row, text in itertools.islice(dense._passages(engine), n)]


def batches_of(texts: list[str], size: int) -> tuple[list[int], list[list[str]]]:
    order = sorted(range(len(texts)), key=lambda j: len(texts[j]))
    return order, [[texts[j] for j in order[k:k + size]] for k in range(0, len(order), size)]


def throughput(texts: list[str], backend: str, device: str, batch_size: int, data_dir: Path) -> dict[str, Any]:
    import numpy as np

    backend, device, dtype = dense.resolve_encoder(device, backend)
    encoder, load_s, load_cpu = measured(lambda: dense.load_encoder(dense.model_name(), backend, device, dtype,
                                                                    data_dir))
    order, batches = batches_of(texts, batch_size)
    encoder.run(encoder.tokenize(batches[0][:8]))   # warm-up (CUDA context, ONNX Runtime's first allocation)
    features, tok_s, tok_cpu = measured(lambda: [encoder.tokenize(b) for b in batches])
    _, net_s, net_cpu = measured(lambda: [encoder.run(f) for f in features])
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
    vecs, s, cpu = measured(lambda: list(encoder.stream(iter(batches))))
    out = np.empty((len(texts), encoder.dim), dtype=np.float32)
    out[order] = np.concatenate(vecs)
    n = len(texts)
    return {"backend": backend, "device": device, "dtype": dtype, "batch_size": batch_size, "passages": n,
            "load_s": round(load_s, 2), "load_cpu_s": round(load_cpu, 2),
            "tokenize_passages_per_s": rate(n, tok_s), "model_passages_per_s": rate(n, net_s),
            "passages_per_s": rate(n, s), "cpu_s": round(cpu, 2), "cpu_ms_per_passage": round(1000 * cpu / n, 2),
            "wall_s": round(s, 2), "_vectors": out}


def before(texts: list[str]) -> dict[str, Any]:
    """The build's embedding before backends: sentence-transformers' encode per 64 consecutive passages, float32."""
    import numpy as np

    st = dense.load_model(dense.model_name(), "cpu")
    parts, s, cpu = measured(lambda: [st.encode(texts[k:k + 64], batch_size=64, normalize_embeddings=True,
                                                show_progress_bar=False) for k in range(0, len(texts), 64)])
    n = len(texts)
    return {"backend": "before (st.encode per 64)", "device": "cpu", "dtype": "float32", "batch_size": 64,
            "passages": n, "passages_per_s": rate(n, s), "cpu_s": round(cpu, 2),
            "cpu_ms_per_passage": round(1000 * cpu / n, 2), "wall_s": round(s, 2),
            "_vectors": np.concatenate(parts).astype(np.float32)}


def ir(backends: list[str], root: Path, names: list[str]) -> dict[str, Any]:
    """nDCG@10 (and Recall@100) of bm25, dense and hybrid per backend and collection, through a fresh service."""
    from bench.bench_ir import local_service
    from eval.ir import evaluate_collection
    from search.client import Client

    out: dict[str, Any] = {}
    for backend in backends:
        os.environ[dense.BACKEND_ENV] = backend   # the service's build_dense reads it (in this process)
        with local_service() as url, Client(url) as client:
            for name in names:
                t0, c0 = time.perf_counter(), cpu_seconds()
                res = evaluate_collection(client, root / name, ("bm25", "dense", "hybrid"))
                runs = {run: {m: round(v, 4) for m, v in metrics.items() if m in ("ndcg@10", "recall@100")}
                        if "error" not in metrics else metrics for run, metrics in res["runs"].items()}
                out.setdefault(backend, {})[name] = {"runs": runs, "wall_s": round(time.perf_counter() - t0, 1),
                                                     "cpu_s": round(cpu_seconds() - c0, 1)}
                print(json.dumps({"ir": name, "backend": backend, **out[backend][name]}), flush=True)
    os.environ.pop(dense.BACKEND_ENV, None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True, help="data dir with an indexed collection")
    ap.add_argument("--collection", default=DEFAULT_COLLECTION)
    ap.add_argument("--passages", type=int, default=1000)
    ap.add_argument("--backends", default="torch,onnx,onnx-int8")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--batch-size", type=int, default=None, help="default: 64 on cpu, 512 on cuda")
    ap.add_argument("--no-before", action="store_true", help="skip the pre-#12 baseline")
    ap.add_argument("--ir", type=Path, default=None, help="folder of BEIR collections (e.g. shared/data/ir)")
    ap.add_argument("--ir-collections", default="med,cranfield,nfcorpus-test")
    ap.add_argument("--out", type=Path, default=None, help="write the result as JSON here too")
    args = ap.parse_args()
    import numpy as np

    texts = sample(args.data_dir, args.collection, args.passages)
    size = args.batch_size or dense.default_batch_size(args.device)
    rows = [] if args.no_before or args.device == "cuda" else [before(texts)]
    for backend in args.backends.split(","):
        rows.append(throughput(texts, backend, args.device, size, args.data_dir))
        print(json.dumps({k: v for k, v in rows[-1].items() if not k.startswith("_")}), flush=True)
    reference = next((r["_vectors"] for r in rows if r["backend"] == "torch"), rows[0]["_vectors"])
    for r in rows:
        cos = np.sum(r.pop("_vectors") * reference, axis=1)
        r["cosine_vs_torch"] = {"min": round(float(cos.min()), 4), "mean": round(float(cos.mean()), 4)}
    result: dict[str, Any] = {"passages": len(texts), "threads": dense._threads(), "throughput": rows}
    if args.ir:
        result["ir"] = ir(args.backends.split(","), args.ir, args.ir_collections.split(","))
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
