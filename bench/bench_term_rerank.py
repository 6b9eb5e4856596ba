"""Would a cross-encoder re-ranker, trained on the ontologies' own synonyms, put first the answer that the fused
term ranking holds in its top K but not at rank 1? (issue #30: GO's strict top-5 is 0.85 where its top-1 is 0.70,
and neither side of the fusion puts the answer first more often than 0.75.)

    .venv/bin/python bench/bench_term_rerank.py --data-dir D [--train-go 6000] [--train-other 2500] [--k 10]
        [--group 8] [--epochs 1] [--lr 1e-4] [--model-out M | --model-in M] [--test] [--json out.json]

``D`` is a data dir with go and fbbt indexed and a term encoder (``flysift train term-encoder``). The experiment:

1. **Training queries** come from the encoder's *training* terms only (neither its dev nor its test terms): one
   synonym per term (a seeded draw), each searched like a strict hold-out query (search.ontology.encoder.holdout:
   the sampled terms lose all their synonyms in one cut index, so a query is answered by paraphrase only), hybrid at
   the version's fusion weight. Its group: the term's name and the names of the first ``group - 1`` wrong terms of
   the fused ranking (hard negatives, the ranking's own mistakes).
2. **The cross-encoder** is the packaged MiniLM reading ``query [SEP] term name`` with a linear head on its
   mean-pooled output, trained with a softmax over each group (the name must win), embeddings and the bottom two
   layers frozen, AdamW with warm-up and linear decay, bfloat16 autocast where the CPU has it; seeded.
3. **Evaluation**: the dev terms' strict queries (the sweep's: at most 3 per term, GO a seeded 1,000), and with
   ``--test`` the test terms' (bench_ontology's: GO a seeded 2,000), are searched hybrid; the fused top ``k`` is
   re-ordered by the cross-encoder (an exact name or synonym keeps rank 1, as in hybrid search); top-1 and top-5
   before and after, and the recall of the top ``k`` (no re-ranking can beat it). Also the CPU time to score one
   query's ``k`` pairs (torch, one thread): what the re-ranker would add to a search.

Only the ontologies are read: never CRAFT or FlyAOC annotations. Nothing here changes what the service serves.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: (query, answer id, candidate ids best first, exact-match ids pinned by hybrid search)
Row = tuple[str, str, list[str], list[str]]
#: (ontology, query, answer id, candidate ids best first)
TrainRow = tuple[str, str, str, list[str]]


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def gather(folder: Path, manifest: dict[str, Any], ont: Any, batch: Sequence[tuple[str, str]],
           k: int, work: Path) -> list[Row]:
    """Each strict query's fused top ``k`` at the version's weight, over one cut index of ``batch``'s terms."""
    from search.ontology.encoder import fusion, holdout

    where = work / f"cut-{ont.name}-{len(batch)}"
    try:
        svc = holdout.cut_service(where, ont, holdout.strict_drop(batch), holdout.LabelRows(folder, manifest, ont))
        weight = fusion.weight_of(svc.encoder_of(ont.name), ont.name)
        rows: list[Row] = []
        for text, tid in batch:
            cands = svc.fusion_candidates(ont.name, text, k)
            if cands is None:
                continue
            pinned = fusion.exact_ids(text, cands.lexical.labels())
            rows.append((text, tid, [t for t, _ in cands.fuse(weight, k)], pinned))
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return rows


def training_batch(ont: Any, manifest: dict[str, Any], n: int, seed: int) -> list[tuple[str, str]]:
    """One synonym each of ``n`` training terms (not dev, not test), a seeded draw."""
    from search.ontology.encoder import holdout
    from search.ontology.encoder.tuning import held_out_terms

    held = held_out_terms(manifest, ont.name, "dev") | held_out_terms(manifest, ont.name, "test")
    cands = holdout.capped([c for c in holdout.eligible(ont) if c[1] not in held], 1, seed)
    return holdout.draw(cands, n, seed)


class CrossEncoder:
    """The packaged MiniLM as a pair scorer: mean-pooled output of ``query [SEP] name`` through a linear head."""

    def __init__(self, path: str, frozen_layers: int = 2, max_length: int = 64, attention: str | None = None):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch, self.path = torch, path
        self.tok = AutoTokenizer.from_pretrained(path)
        self.base = AutoModel.from_pretrained(path, **({"attn_implementation": attention} if attention else {}))
        self.head = torch.nn.Linear(self.base.config.hidden_size, 1)
        self.max_length = max_length
        for name, p in self.base.named_parameters():
            layer = name.split(".layer.", 1)[1].split(".", 1)[0] if ".layer." in name else None
            p.requires_grad_(not ("embeddings." in name or (layer is not None and int(layer) < frozen_layers)))

    def params(self) -> tuple[list[Any], list[Any]]:
        return [p for p in self.base.parameters() if p.requires_grad], list(self.head.parameters())

    def scores(self, queries: list[str], names: list[str]) -> Any:
        f = self.tok(queries, names, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        return self.forward(f["input_ids"], f["attention_mask"], f["token_type_ids"])

    def forward(self, ids: Any, mask: Any, types: Any) -> Any:
        out = self.base(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        m = mask.unsqueeze(-1).to(out.dtype)
        pooled = (out * m).sum(1) / m.sum(1).clamp(min=1)
        return self.head(pooled).squeeze(-1).float()

    def save(self, out: Path) -> None:
        from safetensors.torch import save_file

        out.mkdir(parents=True, exist_ok=True)
        self.base.save_pretrained(out / "base", safe_serialization=True)
        self.tok.save_pretrained(out / "base")
        save_file({k: v.contiguous() for k, v in self.head.state_dict().items()}, str(out / "head.safetensors"))

    @classmethod
    def load(cls, out: Path) -> CrossEncoder:
        from safetensors.torch import load_file

        ce = cls(str(out / "base"))
        ce.head.load_state_dict(load_file(str(out / "head.safetensors")))
        return ce


def groups_of(rows: list[TrainRow], names: dict[str, dict[str, str]], ids: dict[str, list[str]], group: int,
              seed: int) -> list[tuple[str, list[str]]]:
    """Per training query, (query, [the answer's name, then ``group - 1`` wrong names]): the fused ranking's own
    mistakes first, topped up with random terms of the ontology where it had fewer."""
    rng = random.Random(seed)
    out = []
    for ont_name, text, tid, cands in rows:
        table = names[ont_name]
        wrong = [table[c] for c in cands if c != tid and c in table and table[c] != table[tid]][:group - 1]
        pool = ids[ont_name]
        while len(wrong) < group - 1:
            other = pool[rng.randrange(len(pool))]
            if other != tid and table[other] != table[tid]:
                wrong.append(table[other])
        out.append((text, [table[tid], *wrong]))
    return out


def train(ce: CrossEncoder, groups: list[tuple[str, list[str]]], args: argparse.Namespace) -> dict[str, Any]:
    """Softmax over each group, the answer at index 0."""
    from search.ontology.encoder.train import Amp, lr_at, resolve_precision

    torch = ce.torch
    base, head = ce.params()
    opt = torch.optim.AdamW([{"params": base, "lr": args.lr}, {"params": head, "lr": args.lr * 10}],
                            weight_decay=0.01)
    steps_per_epoch = -(-len(groups) // args.batch)
    total = steps_per_epoch * args.epochs
    precision = resolve_precision("cpu", "auto")
    amp = Amp("cpu", precision)
    ce.base.train()
    w0, c0 = time.perf_counter(), cpu_s()
    losses: list[float] = []
    step = 0
    for epoch in range(args.epochs):
        order = list(range(len(groups)))
        random.Random(args.seed + epoch).shuffle(order)
        for s in range(0, len(order), args.batch):
            part = [groups[i] for i in order[s:s + args.batch]]
            for g, base_lr in zip(opt.param_groups, (args.lr, args.lr * 10), strict=True):
                g["lr"] = lr_at(step, total, base_lr, 0.05)
            qs = [q for q, names in part for _ in names]
            ns = [n for _, names in part for n in names]
            torch.manual_seed(args.seed * 1_000_003 + step)
            with amp.autocast():
                logits = ce.scores(qs, ns).view(len(part), -1)
            loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(part), dtype=torch.long))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(base + head, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            step += 1
            if step % 50 == 0 or step == total:
                print(f"  step {step}/{total} epoch {epoch + 1}: loss {statistics.mean(losses[-50:]):.3f}, "
                      f"{time.perf_counter() - w0:.0f} s wall, {cpu_s() - c0:.0f} s CPU", flush=True)
    ce.base.eval()
    return {"steps": total, "groups": len(groups), "group": args.group, "precision": precision,
            "wall_s": time.perf_counter() - w0, "cpu_s": cpu_s() - c0,
            "loss_first_50": statistics.mean(losses[:50]), "loss_last_50": statistics.mean(losses[-50:])}


def rerank(ce: CrossEncoder | OnnxScorer, rows: list[Row], names: dict[str, str]) -> list[list[str]]:
    """Each row's candidates, the pinned (exact) ones first, the rest by the cross-encoder's score."""
    import torch

    out = []
    with torch.inference_mode():
        for text, _, cands, pinned in rows:
            rest = [c for c in cands if c not in pinned]
            if not rest:
                out.append(list(pinned))
                continue
            s = [float(x) for x in ce.scores([text] * len(rest), [names.get(c, "") for c in rest])]
            out.append([*pinned, *[c for _, c in sorted(zip(s, rest, strict=True), key=lambda x: -x[0])]])
    return out


class OnnxScorer:
    """The re-ranker as the service would run it: one int8 ONNX graph (exported and quantised like the term
    encoder's, search.engines.dense), ONNX Runtime on one thread, no spinning."""

    def __init__(self, ce: CrossEncoder, work: Path):
        import warnings

        import onnx
        import onnxruntime as ort
        import torch
        from onnxruntime.quantization import QuantType, quantize_dynamic

        from search.engines.dense import ONNX_OPSET

        eager = CrossEncoder(ce.path, attention="eager")   # SDPA's exported graph runs slowly
        eager.base.load_state_dict(ce.base.state_dict())
        eager.head.load_state_dict(ce.head.state_dict())
        eager.base.eval()
        for p in [*eager.base.parameters(), *eager.head.parameters()]:
            p.requires_grad_(False)
        f = ce.tok(["a query", "another query"], ["a name", "a longer name"], padding=True, return_tensors="pt")
        inputs = ["input_ids", "attention_mask", "token_type_ids"]

        class Graph(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.base, self.head = eager.base, eager.head   # submodules: exported as weights

            def forward(self, ids: Any, mask: Any, types: Any) -> Any:
                return eager.forward(ids, mask, types)

        fp32, q8 = work / "rerank.onnx", work / "rerank-int8.onnx"
        axes = {k: {0: "batch", 1: "tokens"} for k in inputs} | {"score": {0: "batch"}}
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(Graph().eval(), tuple(f[k] for k in inputs), str(fp32), input_names=inputs,
                              output_names=["score"], dynamic_axes=axes, opset_version=ONNX_OPSET, dynamo=False)
        quantize_dynamic(str(fp32), str(q8), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul", "Gemm"],
                         extra_options={"MatMulConstBOnly": True, "DefaultTensorType": onnx.TensorProto.FLOAT})
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(q8), options, providers=["CPUExecutionProvider"])
        self.tok, self.max_length = ce.tok, ce.max_length
        self.size = q8.stat().st_size

    def scores(self, queries: list[str], names: list[str]) -> Any:
        f = self.tok(queries, names, padding=True, truncation=True, max_length=self.max_length, return_tensors="np")
        feed = {k: f[k].astype("int64") for k in ("input_ids", "attention_mask", "token_type_ids")}
        return self.session.run(None, feed)[0]


def figures(rows: list[Row], ranked: list[list[str]] | None = None) -> dict[str, float]:
    n = max(1, len(rows))
    lists = ranked if ranked is not None else [r[2] for r in rows]
    return {"n": len(rows), "top1": sum(h[:1] == [r[1]] for r, h in zip(rows, lists, strict=True)) / n,
            "top5": sum(r[1] in h[:5] for r, h in zip(rows, lists, strict=True)) / n,
            "recall_k": sum(r[1] in r[2] for r in rows) / n}


def score_cost(ce: CrossEncoder | OnnxScorer, rows: list[Row], names: dict[str, str], n: int = 200
               ) -> dict[str, float]:
    """Median and p99 wall and CPU ms to score one query's candidates on one thread (torch float32 or ONNX)."""
    import torch

    from bench.common import percentile

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    walls, cpus = [], []
    with torch.inference_mode():
        for text, _, cands, _ in rows[:n]:
            w, c = time.perf_counter(), cpu_s()
            ce.scores([text] * len(cands), [names.get(x, "") for x in cands])
            walls.append((time.perf_counter() - w) * 1000)
            cpus.append((cpu_s() - c) * 1000)
    torch.set_num_threads(threads)
    return {"wall_ms_p50": percentile(walls, 50), "cpu_ms_p50": percentile(cpus, 50),
            "wall_ms_p99": percentile(walls, 99), "queries": len(walls)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--ontologies", default="go,fbbt")
    ap.add_argument("--train-go", type=int, default=6000, help="GO training queries (one per term)")
    ap.add_argument("--train-other", type=int, default=2500, help="training queries of each other ontology")
    ap.add_argument("--k", type=int, default=10, help="how deep into the fused ranking the re-ranker reads")
    ap.add_argument("--train-k", type=int, default=16, help="how deep training looks for wrong terms")
    ap.add_argument("--group", type=int, default=8, help="names per training query: the answer and wrong ones")
    ap.add_argument("--batch", type=int, default=16, help="training queries per step")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--go-sample-dev", type=int, default=1000)
    ap.add_argument("--go-sample-test", type=int, default=2000)
    ap.add_argument("--test", action="store_true", help="also the test terms (only once dev has decided)")
    ap.add_argument("--model-out", type=Path, help="save the trained re-ranker here (safetensors)")
    ap.add_argument("--model-in", type=Path, help="a re-ranker saved by --model-out: skip training")
    ap.add_argument("--onnx", action="store_true", help="also the int8 ONNX re-ranker: its figures and cost")
    ap.add_argument("--threads", type=int, default=0, help="torch threads for training (0: every core)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    import torch
    import transformers

    from search.core.config import Settings
    from search.engines.dense import model_name
    from search.ontology.encoder import artefact, holdout
    from search.services import Services

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    torch.manual_seed(args.seed)
    version = artefact.current_version(args.data_dir)
    if version is None:
        sys.exit(f"--data-dir {args.data_dir}: no term encoder there (run `flysift train term-encoder`)")
    folder = artefact.version_dir(args.data_dir, version)
    _, manifest = artefact.read_manifest(folder)
    terms = Services.open(Settings(data_dir=args.data_dir, engine="embedded")).terms
    wanted = [n for n in args.ontologies.split(",") if n in terms.names()]
    onts = {n: terms.ontology(n) for n in wanted}
    names = {n: {t.id: t.name for t in o.terms() if not t.obsolete} for n, o in onts.items()}
    out: dict[str, Any] = {"version": version, "args": {k: str(v) for k, v in vars(args).items()}}
    print(f"term encoder {version}; ontologies {', '.join(wanted)}", flush=True)

    with tempfile.TemporaryDirectory(prefix="flysift-rerank-") as tmp:
        work = Path(tmp)
        w0, c0 = time.perf_counter(), cpu_s()
        evals = {"dev": {n: holdout.queries(o, manifest, "dev", args.go_sample_dev, args.seed)
                         for n, o in onts.items()}}
        if args.test:
            evals["test"] = {n: holdout.queries(o, manifest, "test", args.go_sample_test, args.seed)
                             for n, o in onts.items()}
        rows = {split: {n: gather(folder, manifest, onts[n], b, args.k, work) for n, b in per.items()}
                for split, per in evals.items()}
        print(f"evaluation candidates gathered: {time.perf_counter() - w0:.0f} s wall, {cpu_s() - c0:.0f} s CPU",
              flush=True)
        if args.model_in:
            ce = CrossEncoder.load(args.model_in)
        else:
            w0, c0 = time.perf_counter(), cpu_s()
            train_rows: list[TrainRow] = []
            for n, o in onts.items():
                batch = training_batch(o, manifest, args.train_go if n == "go" else args.train_other, args.seed)
                train_rows += [(n, q, t, c) for q, t, c, _ in gather(folder, manifest, o, batch, args.train_k,
                                                                      work)]
            out["gather_train"] = {"queries": len(train_rows), "wall_s": time.perf_counter() - w0,
                                   "cpu_s": cpu_s() - c0}
            print(f"training candidates gathered: {len(train_rows)} queries, {out['gather_train']['wall_s']:.0f} s "
                  f"wall, {out['gather_train']['cpu_s']:.0f} s CPU", flush=True)
            ids = {n: sorted(v) for n, v in names.items()}
            groups = groups_of(train_rows, names, ids, args.group, args.seed)
            ce = CrossEncoder(model_name())
            out["training"] = train(ce, groups, args)
            if args.model_out:
                ce.save(args.model_out)
        results: dict[str, Any] = {}
        for split, per in rows.items():
            for n, rs in per.items():
                before, after = figures(rs), figures(rs, rerank(ce, rs, names[n]))
                results[f"{split} {n}"] = {"fused": before, "reranked": after}
                print(f"{split} {n} strict ({before['n']} queries): fused top-1/top-5 {before['top1']:.3f} / "
                      f"{before['top5']:.3f}; re-ranked {after['top1']:.3f} / {after['top5']:.3f}; the answer in "
                      f"the fused top {args.k}: {before['recall_k']:.3f}", flush=True)
        out["results"] = results
        go_rows = rows["dev"].get("go") or next(iter(rows["dev"].values()))
        out["score_cost"] = score_cost(ce, go_rows, names["go" if "go" in names else wanted[0]])
        print(f"scoring one query's {args.k} candidates (torch, 1 thread, float32): median "
              f"{out['score_cost']['wall_ms_p50']:.1f} ms wall, {out['score_cost']['cpu_ms_p50']:.1f} ms CPU")
        if args.onnx:
            onnx = OnnxScorer(ce, work)
            for split, per in rows.items():
                for n, rs in per.items():
                    after = figures(rs, rerank(onnx, rs, names[n]))
                    results[f"{split} {n}"]["reranked_int8"] = after
                    print(f"{split} {n} strict, int8 ONNX re-ranker: {after['top1']:.3f} / {after['top5']:.3f}",
                          flush=True)
            out["score_cost_int8"] = cost = score_cost(onnx, go_rows, names["go" if "go" in names else wanted[0]])
            out["int8_bytes"] = onnx.size
            print(f"scoring one query's {args.k} candidates (int8 ONNX, 1 thread): median {cost['wall_ms_p50']:.1f} ms "
                  f"wall (p99 {cost['wall_ms_p99']:.1f}), {cost['cpu_ms_p50']:.1f} ms CPU; the graph "
                  f"{onnx.size / 2**20:.0f} MiB")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
