"""Ontology benchmark: load times (cold/warm), FlyAOC ground-truth coverage, hidden-set sizes, Wang speed, the
synonym hold-out quality of term search, and (issue #15) the measuring sets no rule may be fitted to: the frozen
mention list (tests/fixtures/term_mentions_v1.tsv), FlyBase's 2025 labels of FBbt terms whose 2013 label differs,
and term search latency on the full ontologies (wall and CPU, in-process, and the ``flysift terms`` command).

    .venv/bin/python bench/bench_ontology.py [--data ../shared/data] [--go-sample 2000] [--seed 13] [--json out.json]
        [--quality-only] [--readings strict,loo] [--ontologies go,fbbt] [--dev-seed 7] [--sets-only] [--ablations]

With ``--encoder DATA_DIR`` (a data dir where `flysift train term-encoder` wrote a term encoder for these same
ontology files), the hold-outs score the encoder's own held-out terms instead (the test terms of its split, or
``--dev`` its dev terms: only those may be looked at for tuning; at most 3 synonyms per term, GO a seeded sample of
``--go-sample`` of them, FBbt all), each reading for lexical (``mode=bm25``),
the encoder alone (``mode=dense``) and fused (``mode=hybrid``), with GO's molecular functions apart; the
measuring sets and latency are then measured with and without it. ``--weights`` scores hybrid at several fusion
weights (dev only).

    .venv/bin/python bench/bench_ontology.py --encoder /tmp/data --quality-only [--dev --weights 0.5,1,2]

Quality (synonym hold-out): the synonym is the query and its term the answer. Two readings: ``strict``, every
sampled synonym's term loses *all* its synonyms in one fresh index; ``loo`` (leave-one-out), only the queried
synonym is removed (indexes rebuilt in batches, the k-th sampled synonym of each term in batch k). GO: a seeded
sample of synonyms of live terms (the fixed test sample is seed 13); FBbt: all of them. Synonyms whose normalised
text equals their term's name are skipped (trivial). Tune with ``--dev-seed``, never on the test sample.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import folder_terms  # noqa: E402
from search.engines.embedded.terms import TermIndex, normalise  # noqa: E402
from search.ontology import rerank, rewrites  # noqa: E402
from search.ontology.encoder import holdout  # noqa: E402
from search.ontology.encoder.holdout import (  # noqa: E402
    LabelRows,
    cut_service,
    draw,
    eligible,
    search_modes,
    strict_drop,
)
from search.ontology.hidden import expand  # noqa: E402
from search.ontology.model import Ontology, WangSimilarity  # noqa: E402
from search.ontology.service import TermService  # noqa: E402
from search.schema.hidden import named_set  # noqa: E402
from search.text.morphology import Morphology  # noqa: E402

MENTIONS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "term_mentions_v1.tsv"
FBBT_2025 = "ontologies/fbbt_labels_fb2025_04.tsv"

FILES = {"go": "ontologies/go-basic.obo.gz", "fbbt": "ontologies/fbbt-2013-07-26.obo", "fbdv": "ontologies/fbdv.obo"}


def load_times(data: Path, cache: Path) -> dict[str, Ontology]:
    print("## Loading\n")
    print("| ontology | terms | obsolete | alt ids | synonyms | is_a | part_of | cold load s | warm load s |")
    print("|---|---|---|---|---|---|---|---|---|")
    onts = {}
    for name, rel in FILES.items():
        t0 = time.perf_counter()
        Ontology.load(data / rel, name, cache_dir=cache)          # parses OBO, writes the cache
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        ont = Ontology.load(data / rel, name, cache_dir=cache)
        warm = time.perf_counter() - t0
        s = ont.stats()
        print(f"| {name} | {s['terms']} | {s['obsolete']} | {s['alt_ids']} | {s['synonyms']} | "
              f"{s['edges'].get('is_a', 0)} | {s['edges'].get('part_of', 0)} | {cold:.2f} | {warm:.2f} |")
        onts[name] = ont
    return onts


def coverage(data: Path, onts: dict[str, Ontology]) -> None:
    go_ids: set[str] = set()
    fbbt_ids: set[str] = set()
    with open(data / "flyaoc/data/ground_truth_top100.jsonl") as fh:
        for line in fh:
            g = json.loads(line)
            go_ids.update(r["go_id"] for r in g["task1_function"] if r.get("go_id"))
            fbbt_ids.update(r["anatomy_id"] for r in g["task2_expression"] if r.get("anatomy_id"))
    print("\n## FlyAOC ground truth\n")
    for label, ids, ont in (("GO go_id", go_ids, onts["go"]), ("FBbt anatomy_id", fbbt_ids, onts["fbbt"])):
        live = [i for i in ids if (tid := ont.resolve(i)) and not ont.is_obsolete(tid)]
        missing = sorted(set(ids) - set(live))
        print(f"- {label}: {len(ids)} distinct, {len(live)} resolve to live terms, missing {len(missing)}: "
              f"{', '.join(missing)}")


def hidden_sizes(onts: dict[str, Ontology]) -> None:
    go = onts["go"]
    ids = named_set("flyaoc")
    print(f"\n## FlyAOC hidden set on GO {go.data_version}\n\n| reading | hidden ids |\n|---|---|")
    print(f"| the 120 ids as listed ({sum(1 for i in ids if i in go)} in this GO) | {len(expand(go, ids))} |")
    for rel in ("is_a", "is_a+part_of", "regulates", "all"):
        print(f"| with descendants over {rel} | {len(expand(go, ids, descendants=True, relations=rel))} |")


def wang_speed(data: Path, onts: dict[str, Ontology], seed: int) -> None:
    rng = random.Random(seed)
    genes = [json.loads(line) for line in (data / "flyaoc/data/ground_truth_top100.jsonl").read_text().splitlines()]
    print("\n## Wang similarity\n")
    w = WangSimilarity(onts["go"])
    checks = [(w.sim("GO:0000981", "GO:0003700"), 0.81454), (w.sim("GO:0005634", "GO:0005667"), 0.135278),
              (WangSimilarity(onts["fbbt"]).sim("FBbt:00001040", "FBbt:00001036"), 0.886261)]
    print("- worked values (spec §5): " + ", ".join(f"{got:.6f} (spec {want})" for got, want in checks))
    for name, key, field in (("go", "task1_function", "go_id"), ("fbbt", "task2_expression", "anatomy_id")):
        ont = onts[name]
        pool = [t for t in ont.ids if not ont.is_obsolete(t) and t.startswith(("GO:", "FBbt:"))]
        work = []
        for g in genes:
            truths = sorted({r[field] for r in g[key] if r.get(field) and r.get("in_corpus")})
            work.append((rng.sample(pool, 30), truths))
        pairs = sum(30 * len(t) for _, t in work)
        for label in ("cold", "warm"):
            if label == "cold":
                w = WangSimilarity(ont)
            t0 = time.perf_counter()
            total = sum(sum(w.best_match_sums(p, t)) for p, t in work)
            dt = time.perf_counter() - t0
            print(f"- {name}: 100 genes × 30 candidates vs their in-corpus truths ({pairs} pairs), {label} cache: "
                  f"{dt:.2f} s (sum of best matches {total:.2f})")


def holdout_service(ont: Ontology, drop: dict[str, set[str] | None], path: Path) -> TermService:
    """A service over a fresh index of ``ont`` cut by ``drop`` (search.ontology.encoder.holdout.cut_ontology)."""
    return cut_service(path, ont, drop, None)


def batches(queries: list[tuple[str, str]], reading: str) -> list[list[tuple[str, str]]]:
    """strict: one index in which every queried term loses all its synonyms. loo (leave-one-out): the k-th query
    of every term goes in batch k, whose index drops only that synonym, so no term loses two at once."""
    if reading == "strict":
        return [queries]
    seen: dict[str, int] = {}
    out: list[list[tuple[str, str]]] = []
    for q in queries:
        k = seen[q[1]] = seen.get(q[1], -1) + 1
        if k == len(out):
            out.append([])
        out[k].append(q)
    return out


def synonym_holdout(ont: Ontology, queries: list[tuple[str, str]], reading: str, tmp: Path) -> dict:
    top1 = top5 = 0
    lat = []
    misses = []
    for k, batch in enumerate(batches(queries, reading)):
        drop: dict[str, set[str] | None] = (
            {tid: None for _, tid in batch} if reading == "strict" else {tid: {normalise(text)} for text, tid in batch})
        svc = holdout_service(ont, drop, tmp / f"{ont.name}-{reading}-{k}")
        for text, tid in batch:
            t0 = time.perf_counter()
            hits = [h.id for h in svc.search(ont.name, text, limit=5).hits]   # the resolver returns this ranking
            lat.append((time.perf_counter() - t0) * 1000)
            top1 += hits[:1] == [tid]
            top5 += tid in hits
            if hits[:1] != [tid]:
                misses.append({"query": text, "want": tid, "want_name": ont.name_of(tid), "got": hits})
    n = len(queries)
    return {"ontology": ont.name, "reading": reading, "queries": n, "terms": len({t for _, t in queries}),
            "indexes": k + 1, "top1": top1 / n, "top5": top5 / n, "p50_ms": statistics.median(lat),
            "p95_ms": statistics.quantiles(lat, n=20)[18], "misses": misses}


def quality(onts: dict[str, Ontology], args: argparse.Namespace, tmp: Path) -> list[dict]:
    print("\n## Synonym hold-out (term search)\n\n| ontology | sample | reading | queries | terms | indexes | top-1 | "
          "top-5 | search p50 ms | p95 ms |\n|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name, sample in (("go", args.go_sample), ("fbbt", None)):
        if name not in args.ontologies:
            continue
        cands = eligible(onts[name])
        queries = draw(cands, sample, args.seed)
        label = f"test (seed {args.seed})" if sample else "all"
        if args.dev_seed is not None:   # tuning: a different seed, and none of the test sample's terms
            queries = (draw(cands, sample, args.dev_seed, {tid for _, tid in queries}) if sample else
                       draw(cands, len(cands) // 2, args.dev_seed))   # FBbt publishes all: a seeded half
            label = f"dev (seed {args.dev_seed})"
        for reading in args.readings:
            r = synonym_holdout(onts[name], queries, reading, tmp)
            r["sample"] = label
            rows.append(r)
            print(f"| {name} | {label} | {reading} | {r['queries']} | {r['terms']} | {r['indexes']} | "
                  f"{r['top1']:.3f} | {r['top5']:.3f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} |", flush=True)
    return rows


def full_service(onts: dict[str, Ontology], path: Path, encoder: Path | None = None) -> TermService:
    """A service over fresh full indexes of the ontologies (as ``flysift index ontology`` writes them), with the
    term encoder of data dir ``encoder`` (linked) when given."""
    svc = folder_terms(path)
    for ont in onts.values():
        svc.index_ontology(ont, TermIndex(path).write)
    if encoder is not None:
        from search.ontology.encoder import ROOT

        (path / ROOT).symlink_to((encoder / ROOT).resolve())
    return folder_terms(path)   # reads the saved models, as a served instance does


def read_mentions() -> list[dict[str, str]]:
    with open(MENTIONS) as fh:
        return list(csv.DictReader((line for line in fh if not line.startswith("#")), delimiter="\t"))


def score(svc: TermService, queries: list[tuple[str, str, str, str]], mode: str | None = None) -> dict:
    """``(ontology, query, want id, class)`` → top-1 / top-5 overall and per class, and the misses."""
    n1 = n5 = 0
    per: Counter[str] = Counter()
    ok: Counter[str] = Counter()
    misses = []
    for ont, q, want, cls in queries:
        hits = [h.id for h in svc.search(ont, q, limit=5, mode=mode).hits]
        n1 += hits[:1] == [want]
        n5 += want in hits
        per[cls] += 1
        ok[cls] += hits[:1] == [want]
        if hits[:1] != [want]:
            misses.append({"query": q, "want": want, "got": hits[:3]})
    n = max(1, len(queries))
    return {"queries": len(queries), "top1": n1 / n, "top5": n5 / n,
            "by_class": {c: f"{ok[c]}/{per[c]}" for c in sorted(per)}, "misses": misses}


def fbbt_2025(data: Path, ont: Ontology) -> list[tuple[str, str, str, str]]:
    """FBbt terms live in 2013 whose FlyBase 2025 label differs (normalised) from the 2013 one: query the 2025 label,
    expect the id."""
    out = []
    with open(data / FBBT_2025) as fh:
        for r in csv.DictReader(fh, delimiter="\t"):
            if r["status_in_fbbt_2013"] == "live" and normalise(r["label_fb2025_04"]) != normalise(
                    r["label_in_fbbt_2013"]) and r["fbbt_id"] in ont:
                out.append(("fbbt", r["label_fb2025_04"], r["fbbt_id"], "2025 label"))
    return out


#: ranking steps of issue #15, each switched off alone (module constants and the saved morphology): the module of
#: each switch (the re-ranker's scores, or the query rewrites)
SWITCHES = {"EXACT_BONUS": rerank, "W_GENERAL": rerank, "spell_greek": rewrites, "mention_forms": rewrites,
            "spelled": rewrites, "ABBREV_EXPANSIONS": rewrites}


def _ablate(svc: TermService, step: str) -> dict:
    saved = {k: getattr(module, k) for k, module in SWITCHES.items()}
    models = {n: svc.rerank_model(svc.ontology(n)) for n in svc.names()}
    morphs = {n: m.morph for n, m in models.items()}
    if step == "exact-label bonus":
        rerank.EXACT_BONUS = {k: 0.0 for k in saved["EXACT_BONUS"]}
    elif step == "generality (one-word queries)":
        rerank.W_GENERAL = 0.0
    elif step == "Greek letters spelled":
        rewrites.spell_greek = lambda text: text
    elif step == "morphology":
        for m in models.values():
            m.morph = Morphology()
    elif step == "split words joined":
        rewrites.mention_forms = lambda vocab, ws: vocab.morph.variants(ws)
    elif step == "spelling correction":
        rewrites.spelled = lambda vocab, ws: None
    elif step == "abbreviations expanded":
        rewrites.ABBREV_EXPANSIONS = 0
    return {"saved": saved, "morphs": morphs, "models": models}


def _restore(state: dict) -> None:
    for k, v in state["saved"].items():
        setattr(SWITCHES[k], k, v)
    for n, m in state["models"].items():
        m.morph = state["morphs"][n]


def measuring_sets(svc: TermService, data: Path, onts: dict[str, Ontology], ablations: bool,
                   modes: tuple[str | None, ...] = (None,)) -> list[dict]:
    mentions = [(r["ontology"], r["mention"], r["expected_id"], r["class"]) for r in read_mentions()]
    sets = {"frozen mention list v1": mentions}
    if "fbbt" in onts:
        sets["FBbt 2025 labels (2013 label differs)"] = fbbt_2025(data, onts["fbbt"])
    print("\n## Measuring sets (never tuned on)\n\n| set | mode | queries | top-1 | top-5 | top-1 by class |\n"
          "|---|---|---|---|---|---|")
    rows = []
    for label, qs in sets.items():
        for mode in modes:
            r = score(svc, [q for q in qs if q[0] in onts], mode)
            r["set"] = label
            r["mode"] = mode or "default"
            rows.append(r)
            cls = ", ".join(f"{c} {v}" for c, v in r["by_class"].items()) if len(r["by_class"]) > 1 else ""
            print(f"| {label} | {mode or 'default'} | {r['queries']} | {r['top1']:.3f} | {r['top5']:.3f} | {cls} |",
                  flush=True)
    if any(m == "hybrid" for m in modes):
        rows.append(mf_rule_on_mentions(svc, mentions, onts))
    if ablations:
        print("\n### What each ranking step buys (each switched off alone; the rest as served)\n")
        print("| switched off | " + " | ".join(f"{k} top-1 / top-5" for k in sets) + " |\n|---|"
              + "---|" * len(sets))
        for step in ("nothing", "morphology", "exact-label bonus", "Greek letters spelled", "split words joined",
                     "generality (one-word queries)", "spelling correction", "abbreviations expanded"):
            state = _ablate(svc, step)
            try:
                cells = [score(svc, [q for q in qs if q[0] in onts]) for qs in sets.values()]
            finally:
                _restore(state)
            print(f"| {step} | " + " | ".join(f"{c['top1']:.3f} / {c['top5']:.3f}" for c in cells) + " |", flush=True)
    return rows


def http_latency(data_dir: Path, queries: list[str], port: int | None = None) -> dict:
    """The same GO queries over HTTP: ``flysift serve`` (one worker) on loopback, one keep-alive client, after a
    warm-up pass; wall time per request at the client and the server's CPU per request."""
    import httpx
    import psutil

    from bench.common import flysift_command, free_port, percentile, served, tree_cpu

    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    with served([*flysift_command(), "serve", "--data-dir", str(data_dir), "--port", str(port), "--workers", "1"],
                f"{base}/v1/health") as server, httpx.Client(base_url=base, timeout=30.0) as client:
        def one(q: str) -> None:
            client.get("/v1/terms/search", params={"ontology": "go", "query": q, "limit": 10}).raise_for_status()
        for q in queries:
            one(q)
        proc = psutil.Process(server.pid)
        c0 = tree_cpu(proc)
        wall = []
        for q in queries:
            t0 = time.perf_counter()
            one(q)
            wall.append((time.perf_counter() - t0) * 1000)
        cpu = tree_cpu(proc) - c0
    r = {"wall_p50": percentile(wall, 50), "wall_p99": percentile(wall, 99), "server_cpu_ms": cpu * 1000 / len(queries)}
    print(f"| go over HTTP (flysift serve, 1 worker, 1 connection) | {len(queries)} | {r['wall_p50']:.1f} | "
          f"{r['wall_p99']:.1f} | {r['server_cpu_ms']:.1f} (server, mean) | |")
    return r


def latency(svc: TermService, onts: dict[str, Ontology], data_dir: Path, seed: int, n: int = 500,
            modes: tuple[str | None, ...] = (None,), port: int | None = None) -> dict:
    """Term search time per query, in-process on the full index (the service warm: ontology and model loaded), over a
    seeded sample of synonyms typed as queries; wall and CPU (the machine is shared: CPU time is the steadier
    figure), per mode (None: the default, hybrid when a term encoder is present). Then ``flysift terms`` as a fresh
    process, which loads the re-ranker model (not the ontology)."""
    print("\n## Term search latency (full ontologies, in-process, service warm)\n")
    print("| ontology | mode | queries | wall p50 ms | wall p99 ms | CPU p50 ms | CPU p99 ms |\n"
          "|---|---|---|---|---|---|---|")
    out: dict = {}
    p = lambda xs, f: sorted(xs)[min(len(xs) - 1, int(f * len(xs)))]  # noqa: E731
    for name, ont in onts.items():
        if name not in svc.names():
            continue
        qs = random.Random(seed).sample(eligible(ont), n)
        for mode in modes:
            svc.search(name, "warm up", mode=mode)
            wall, cpu = [], []
            for q, _ in qs:
                t0, c0 = time.perf_counter(), time.process_time()
                svc.search(name, q, limit=10, mode=mode)
                cpu.append((time.process_time() - c0) * 1000)
                wall.append((time.perf_counter() - t0) * 1000)
            label = mode or svc.search(name, "warm up").mode + " (default)"
            out[f"{name} {label}"] = {"wall_p50": p(wall, .5), "wall_p99": p(wall, .99), "cpu_p50": p(cpu, .5),
                                      "cpu_p99": p(cpu, .99)}
            print(f"| {name} | {label} | {n} | {p(wall, .5):.1f} | {p(wall, .99):.1f} | {p(cpu, .5):.1f} | "
                  f"{p(cpu, .99):.1f} |", flush=True)
    if any(m == "hybrid" for m in modes) and "go" in svc.names():
        out["encoder"] = encoder_latency(svc, onts["go"], seed, n)
    if "go" in svc.names():
        out["http"] = http_latency(data_dir, [q for q, _ in random.Random(seed).sample(eligible(onts["go"]), n)], port)
    flysift = Path(sys.executable).with_name("flysift")
    if flysift.exists() and "go" in svc.names():
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            before = os.times()
            subprocess.run([str(flysift), "terms", "nuclei", "--data-dir", str(data_dir), "-n", "3", "--json"],
                           check=True, capture_output=True)
            after = os.times()
            runs.append((time.perf_counter() - t0, (after.children_user - before.children_user)
                         + (after.children_system - before.children_system)))
        w = statistics.median(r[0] for r in runs)
        c = statistics.median(r[1] for r in runs)
        out["cli"] = {"wall_s": w, "cpu_s": c}
        print(f"\n`flysift terms nuclei --ontology go` (a fresh process, 3 runs, default mode): median {w:.2f} s wall, "
              f"{c:.2f} s CPU")
    return out


def encoder_latency(svc: TermService, go: Ontology, seed: int, n: int) -> dict:
    """Where hybrid's time goes on GO: the query's embedding (int8 ONNX), the HNSW graph's nearest labels, and the
    graph's top 5 terms against an exact matrix product's (recall of the served approximation)."""
    from search.ontology.encoder.runtime import LabelVectors

    loaded = svc.encoders.get("go", lambda: svc.ontology("go"), svc._indexed("go"))
    qs = [q for q, _ in random.Random(seed + 1).sample(eligible(go), n)]
    enc, near = [], []
    same = 0.0
    exact = LabelVectors.read(loaded.folder, "go", loaded.manifest.ontologies["go"], loaded.manifest.dim, exact=True) \
        if loaded.vectors.hnsw is not None else None
    for q in qs:
        t0 = time.perf_counter()
        v = loaded.encoder.encode([q])[0]
        t1 = time.perf_counter()
        got = [x.id for x in loaded.vectors.nearest(v, 30)]
        t2 = time.perf_counter()
        enc.append((t1 - t0) * 1000)
        near.append((t2 - t1) * 1000)
        if exact is not None:
            same += len(set(got[:5]) & {x.id for x in exact.nearest(v, 5)}) / 5
    p = lambda xs, f: sorted(xs)[min(len(xs) - 1, int(f * len(xs)))]  # noqa: E731
    r = {"encode_p50": p(enc, .5), "encode_p99": p(enc, .99), "nearest_p50": p(near, .5), "nearest_p99": p(near, .99),
         "hnsw_top5_recall": same / len(qs) if exact is not None else None,
         "index": loaded.manifest.ontologies["go"].index, "threads": os.environ.get("FLYSIFT_ENCODER_THREADS", "1")}
    print(f"\nGO hybrid, its parts (wall, {n} other synonyms): query embedding p50 {r['encode_p50']:.1f} / p99 "
          f"{r['encode_p99']:.1f} ms; nearest 30 terms ({r['index']}) p50 {r['nearest_p50']:.2f} / p99 "
          f"{r['nearest_p99']:.2f} ms" + (f"; the graph's top 5 terms hold {r['hnsw_top5_recall']:.3f} of the exact "
                                          "product's" if exact is not None else ""))
    return r


def mf_rule_on_mentions(svc: TermService, mentions: list[tuple[str, str, str, str]], onts: dict[str, Ontology]
                        ) -> dict:
    """The MF rule on the mention list's GO mentions: how many name an activity, how many would abstain, and how
    often the fused top 1 is right in each group."""
    from search.ontology.encoder.mf import activity_shaped

    go = onts.get("go")
    if go is None:
        return {}
    ns = {want: t.namespace for o, _, want, _ in mentions if o == "go" and (t := go.get(want)) is not None}
    rows = [(q, want) for o, q, want, _ in mentions if o == "go" and want in ns]
    mf = [(q, w) for q, w in rows if ns[w] == "molecular_function"]
    shaped = [(q, w) for q, w in mf if activity_shaped(q)]
    right = lambda qs: sum([h.id for h in svc.search("go", q, limit=1).hits] == [w] for q, w in qs)  # noqa: E731
    others = [(q, w) for q, w in rows if ns[w] != "molecular_function"]
    lost = sum(1 for q, _ in others if not activity_shaped(q) and
               [h.aspect for h in svc.search("go", q, limit=1).hits] == ["F"])
    r = {"set": "MF rule on the mention list", "go_mentions": len(rows), "mf_mentions": len(mf),
         "mf_activity_shaped": len(shaped), "mf_shaped_top1": right(shaped),
         "mf_not_shaped_top1": right([x for x in mf if x not in shaped]),
         "non_mf_wrongly_answered_with_mf_when_not_shaped": lost}
    print(f"\nMF rule on the mention list: {len(mf)} of its {len(rows)} GO mentions are molecular functions; "
          f"{len(shaped)} of those name an activity (fused top-1 right for {r['mf_shaped_top1']}), "
          f"{len(mf) - len(shaped)} do not (right for {r['mf_not_shaped_top1']}: `mf_activity_only` abstains on "
          f"them); of the {len(others)} other GO mentions, {lost} not activity-shaped ones get an MF term first "
          f"(dropped by the rule)")
    return r

# ---- the term encoder (issue #30) -----------------------------------------------------------------------------------

def encoder_artefact(data_dir: Path) -> tuple[Path, dict]:
    """The current term encoder version of ``data_dir``: its folder and full manifest."""
    from search.ontology.encoder import artefact

    version = artefact.current_version(data_dir)
    if version is None:
        sys.exit(f"--encoder {data_dir}: no term encoder there (run `flysift train term-encoder --data-dir ...`)")
    folder = artefact.version_dir(data_dir, version)
    return folder, artefact.read_manifest(folder)[1]


ENCODER_MODES = ("bm25", "dense", "hybrid")


def encoder_holdout(onts: dict[str, Ontology], args: argparse.Namespace, tmp: Path) -> list[dict]:
    """Strict and leave-one-out hold-outs on the encoder's held-out terms, for lexical, encoder alone and fused
    (every fusion weight of ``--weights``), searched through the service like any request (exact vector search:
    each cut index is one matrix product; the served HNSW graph is compared with it under Latency)."""
    from search.ontology.encoder import fusion
    from search.ontology.encoder.mf import activity_shaped

    folder, manifest = encoder_artefact(args.encoder)
    which = "dev" if args.dev else "test"
    weights = args.weights or [None]   # None: the weight the manifest records (fusion.weight_of)
    t = manifest["training"]
    print(f"\n## Term encoder {manifest['version']}\n\ntrained {t['seconds'] / 60:.1f} min wall, "
          f"{t['cpu_seconds'] / 60:.1f} min CPU ({t['device']}, {t['precision']}, {t['threads']} threads; "
          f"{t['steps']:,} steps, {len(t['epochs'])} epochs); export {t['export_seconds'] / 60:.1f} min, labels "
          f"embedded in {t['embed_seconds'] / 60:.1f} min wall ({t['embed_cpu_seconds'] / 60:.1f} min CPU); "
          f"artefact {manifest['sizes']['total'] / 2 ** 20:.0f} MiB (model {manifest['sizes']['model'] / 2 ** 20:.0f}, "
          f"int8 ONNX {manifest['sizes']['onnx'] / 2 ** 20:.0f}, vectors {manifest['sizes']['vectors'] / 2 ** 20:.0f})")
    recorded = {n: e.get("fusion_weight") for n, e in manifest["ontologies"].items()}
    print("fusion weight (manifest): " + ", ".join(
        f"{n} {w if w is not None else f'{fusion.DEFAULT_WEIGHT} (default)'}" for n, w in recorded.items())
          + (f"; tuned on {manifest['fusion']['tuned_on']} terms" if "fusion" in manifest else ""))
    for e in t["epochs"]:
        print(f"- epoch {e['epoch']}: {e['pairs']:,} pairs, {e['batches']:,} batches, mean loss {e['loss']:.3f}, "
              f"hard negatives {e['negatives']}")
    cols = " | ".join(f"{m if m != 'hybrid' or len(weights) == 1 else f'hybrid w={w}'} top-1 / top-5"
                      for m in ENCODER_MODES for w in (weights if m == "hybrid" else [None]))
    print(f"\n### Held-out {which} terms (never trained on)\n\n| ontology | reading | queries | terms | indexes | "
          f"{cols} |\n|---|---|---|---|---|" + "---|" * (len(ENCODER_MODES) - 1 + len(weights)))
    rows = []
    for name in args.ontologies:
        if name not in manifest["held_out"]:
            continue
        ont = onts[name]
        try:
            rows_of = LabelRows(folder, manifest, ont)
        except ValueError as e:   # an encoder of other ontology files: one line
            sys.exit(f"--encoder {args.encoder}: {e}")
        queries = holdout.queries(ont, manifest, which, args.go_sample, args.seed)
        for reading in args.readings:
            per: dict[str, list[tuple[str, str, list[str]]]] = {}
            k = 0
            for k, batch in enumerate(batches(queries, reading)):
                drop: dict[str, set[str] | None] = (strict_drop(batch) if reading == "strict" else
                                                    {tid: {normalise(text)} for text, tid in batch})
                d = tmp / f"enc-{name}-{reading}-{k}"
                svc = cut_service(d, ont, drop, rows_of)
                runs = [(m, m, None) for m in ENCODER_MODES[:2]] + [
                    ("hybrid" if len(weights) == 1 else f"hybrid w={w}", "hybrid", w) for w in weights]
                for label, results in search_modes(svc, name, batch, runs).items():
                    per.setdefault(label, []).extend(results)
                shutil.rmtree(d, ignore_errors=True)
            r = {"ontology": name, "split": which, "reading": reading, "queries": len(queries),
                 "terms": len({t for _, t in queries}), "indexes": k + 1, "version": manifest["version"],
                 "modes": {m: _topk(v) for m, v in per.items()}, "either": _either(per["bm25"], per["dense"])}
            if name == "go":
                r["aspects"] = _by_aspect(ont, per, activity_shaped)
            rows.append(r)
            cells = " | ".join(f"{v['top1']:.3f} / {v['top5']:.3f}" for v in r["modes"].values())
            print(f"| {name} | {reading} | {r['queries']} | {r['terms']} | {r['indexes']} | {cells} |", flush=True)
    if rows:
        print("\nWhere the two sides could take a fusion (a reference, not a bound: a fused list may also rank "
              "first a term neither side ranks first): the share of queries whose answer is the first hit of "
              "bm25 or of the encoder alone, and in the top 5 of either.\n\n| ontology | reading | either top-1 | "
              "either top-5 |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['ontology']} | {r['reading']} | {r['either']['top1']:.3f} | {r['either']['top5']:.3f} |")
    for r in rows:
        if "aspects" in r:
            print(f"\n### GO {r['reading']}, by the answer's aspect (MF apart; the MF rule: docs/ontologies.md)\n")
            print("| answer aspect | queries | " + " | ".join(f"{m} top-1 / top-5" for m in r["modes"]) +
                  " |\n|---|---|" + "---|" * len(r["modes"]))
            for aspect, cells in r["aspects"].items():
                n = next(iter(cells.values()))["n"]
                print(f"| {aspect} | {n} | " + " | ".join(f"{c['top1']:.3f} / {c['top5']:.3f}" for c in cells.values())
                      + " |")
    return rows


def record_weights(data_dir: Path, rows: list[dict]) -> None:
    """The best dev weight per ontology (search.ontology.encoder.tuning), written into the encoder's manifest."""
    from search.ontology.encoder import fusion, tuning

    chosen = tuning.choose_weights(rows, fusion.DEFAULT_WEIGHT)
    version = tuning.record(data_dir, chosen)
    print(f"\nfusion weights chosen on the dev terms (strict top-1 + top-5), recorded in {version}'s manifest: "
          + ", ".join(f"{n} {c['weight']} ({c['queries']} queries)" for n, c in chosen.items()))


def _topk(results: list[tuple[str, str, list[str]]]) -> dict:
    return {**holdout.topk(results),
            "misses": [{"query": q, "want": t, "got": h[:3]} for q, t, h in results if h[:1] != [t]][:300]}


def _either(a: list[tuple[str, str, list[str]]], b: list[tuple[str, str, list[str]]]) -> dict:
    """Top-1/top-5 of "either ranking": the answer first in ``a`` or in ``b``; in the top 5 of either (the same
    queries in the same order)."""
    n = max(1, len(a))
    pairs = list(zip(a, b, strict=True))
    return {"top1": sum(x[2][:1] == [x[1]] or y[2][:1] == [y[1]] for x, y in pairs) / n,
            "top5": sum(x[1] in x[2][:5] or y[1] in y[2][:5] for x, y in pairs) / n}


def _by_aspect(ont: Ontology, per: dict[str, list[tuple[str, str, list[str]]]], shaped: Callable[[str], bool]
               ) -> dict[str, dict]:
    """Top-1/top-5 per mode by the answer term's aspect; MF also split by whether the query is activity-shaped."""
    ns = {t: ont.get(t).namespace for r in per.values() for _, t, _ in r}   # type: ignore[union-attr]
    groups: dict[str, Callable[[str, str], bool]] = {
        "P (biological process)": lambda q, t: ns[t] == "biological_process",
        "C (cellular component)": lambda q, t: ns[t] == "cellular_component",
        "F (molecular function)": lambda q, t: ns[t] == "molecular_function",
        "F, activity-shaped query": lambda q, t: ns[t] == "molecular_function" and shaped(q),
        "F, query not activity-shaped": lambda q, t: ns[t] == "molecular_function" and not shaped(q),
    }
    out: dict[str, dict] = {}
    for label, test in groups.items():
        out[label] = {}
        for mode, results in per.items():
            sub = [x for x in results if test(x[0], x[1])]
            out[label][mode] = {k: v for k, v in _topk(sub).items() if k != "misses"}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--go-sample", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=13, help="Seed of the Wang work and of the fixed test sample")
    ap.add_argument("--dev-seed", type=int, help="Score a dev sample instead (this seed, terms disjoint from the "
                                                  "test sample's; FBbt: half its synonyms): for tuning")
    ap.add_argument("--readings", type=lambda s: s.split(","), default=["strict", "loo"],
                    help="Hold-out readings, comma-separated: strict (the term loses all its synonyms), loo (only "
                         "the queried synonym)")
    ap.add_argument("--ontologies", type=lambda s: s.split(","), default=["go", "fbbt"])
    ap.add_argument("--quality-only", action="store_true", help="Skip loading times, coverage, hidden sets, Wang")
    ap.add_argument("--json", type=Path, help="Also write the quality numbers (and the top-1 misses) here")
    ap.add_argument("--sets-only", action="store_true", help="Only the measuring sets and latency (no hold-out)")
    ap.add_argument("--ablations", action="store_true", help="Also score the measuring sets with each ranking step "
                                                             "switched off alone")
    ap.add_argument("--encoder", type=Path, help="A data dir with a term encoder trained on these ontology files: "
                                                 "score its held-out terms (lexical, encoder, fused) and measure "
                                                 "the sets and latency with it")
    ap.add_argument("--dev", action="store_true", help="With --encoder: the encoder's dev terms (for tuning)")
    ap.add_argument("--weights", type=lambda s: [float(w) for w in s.split(",")],
                    help="With --encoder: score hybrid at each of these fusion weights (tune on --dev only)")
    ap.add_argument("--skip-latency", action="store_true", help="Leave out the latency part (with an encoder, "
                                                                "bench/bench_term_latency.py measures it against "
                                                                "a baseline)")
    ap.add_argument("--record", action="store_true", help="With --dev --weights: write the best dev weight per "
                                                          "ontology into the encoder's manifest (where term search "
                                                          "reads it)")
    ap.add_argument("--port", type=int, help="Loopback port of the served API for the HTTP latency "
                                             "[default: a free one]")
    args = ap.parse_args()
    if args.weights and args.encoder and not args.dev:
        ap.error("--weights is for tuning: use it with --dev (the test terms only measure)")
    if args.record and not (args.dev and args.weights and args.encoder):
        ap.error("--record writes the weight chosen on the dev terms: use it with --encoder D --dev --weights …")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.quality_only or args.sets_only:
            onts = {n: Ontology.load(args.data / FILES[n], n) for n in args.ontologies}   # the user cache
        else:
            onts = load_times(args.data, tmp / "cache")
            coverage(args.data, onts)
            hidden_sizes(onts)
            wang_speed(args.data, onts, args.seed)
        if args.encoder:
            rows = [] if args.sets_only else encoder_holdout(onts, args, tmp)
            if args.dev:   # tuning looks at the dev terms only
                if args.record:
                    record_weights(args.encoder, rows)
                if args.json:
                    args.json.write_text(json.dumps(rows, indent=2))
                return
            full = full_service(onts, tmp / "full", args.encoder)
            modes: tuple[str | None, ...] = ("bm25", "hybrid")
        else:
            rows = [] if args.sets_only else quality(onts, args, tmp)
            full = full_service(onts, tmp / "full")
            modes = (None,)
        rows += measuring_sets(full, args.data, onts, args.ablations, modes)
        if not args.skip_latency:
            rows.append({"latency": latency(full, onts, tmp / "full", args.seed, modes=modes, port=args.port)})
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
