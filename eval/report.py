"""Writes evaluation results as JSON (stable shape for scripts), a Markdown summary and PNG plots (matplotlib, Agg).

FlyAOC: ``summary.json`` (``tasks.go|anatomy|synonyms`` each with ``recall_micro``, ``recall_macro``,
``exact_recall_micro``, ``precision_micro``, ``n_ground_truth``, ``k``…), ``genes.json``, ``issues.json``,
``report.md``, ``recall_by_task.png``, ``recall_at_k.png``, ``per_gene.png``.
IR: ``metrics.json`` (``ndcg@10``, ``recall@100``, ``map``, ``mrr``, ``n_queries`` per run…), ``report.md``,
``per_query_delta.png``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from eval.flyaoc import SEMANTIC_TASKS, TASKS, Evaluation
from search.core.extras import require

FLYAOC_SCHEMA = "flysift.eval.flyaoc/1"


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, imported on the first plot (the ``eval`` extra)."""
    matplotlib = require("matplotlib", "eval", "plotting evaluation results")
    matplotlib.use("Agg")
    return require("matplotlib.pyplot", "eval", "plotting evaluation results")
IR_SCHEMA = "flysift.eval.ir/1"
HEADLINE_TASKS = ("go", "anatomy", "synonyms")
#: Item counts the FlyAOC paper states; its own evaluator computes 868 / 364 / 457 (spec §4.2).
PAPER_DENOMINATORS = {"go": 770, "anatomy": 252, "synonyms": 457}
TASK_LABELS = {"go": "GO", "anatomy": "anatomy", "synonyms": "synonyms (combined)",
               "synonyms_fullname": "synonyms (fullname)", "synonyms_symbol": "synonyms (symbol)"}


def _dump(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=1, sort_keys=False) + "\n", encoding="utf-8")


def _f(x: float | None) -> str:
    return "–" if x is None else f"{x:.4f}"


def _ci(pair: list[float] | None) -> str:
    return "–" if not pair else f"[{pair[0]:.4f}, {pair[1]:.4f}]"


# ---------------------------------------------------------------------------------------------------------------
# FlyAOC
# ---------------------------------------------------------------------------------------------------------------

def flyaoc_summary(ev: Evaluation, inputs: dict[str, Any], coverage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The machine-readable summary. Values are unrounded; FlyAOC prints them rounded to 4 decimals."""
    n_err = sum(1 for i in ev.issues if i.severity == "error")
    return {
        "schema": FLYAOC_SCHEMA,
        "mode": ev.mode,
        "missing_as_failed": ev.missing_as_failed,
        "k_values": list(ev.k_values),
        "headline_k": {t: ev.headline_k[t] for t in HEADLINE_TASKS},
        "inputs": inputs,
        "genes": {
            "in_ground_truth": len(ev.statuses),
            "evaluated": len(ev.genes),
            "ok": len(ev.genes_with("ok")),
            "failed_ids": ev.genes_with("failed"),
            "invalid_ids": ev.genes_with("invalid"),
            "missing_ids": ev.genes_with("missing"),
            "missing_counted_as_failed": ev.missing_as_failed,
        },
        "tasks": ev.aggregate,
        "paper_denominators": PAPER_DENOMINATORS,
        "bootstrap": {k: ev.bootstrap[k] for k in ("n_resamples", "seed", "level")},
        "issues": {"errors": n_err, "warnings": len(ev.issues) - n_err},
        "coverage": coverage,
    }


def write_flyaoc_report(ev: Evaluation, out_dir: str | Path, inputs: dict[str, Any],
                        coverage: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write every FlyAOC artefact into ``out_dir``; returns the summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = flyaoc_summary(ev, inputs, coverage)
    _dump(out / "summary.json", summary)
    per_gene_cov = (coverage or {}).get("genes", {})
    genes = [{"gene_id": g, "status": ev.statuses[g],
              "tasks": {t: ev.scores[g][t].to_dict() for t in TASKS} if g in ev.scores else None,
              "coverage": per_gene_cov.get(g),
              "issues": [i.to_dict() for i in ev.issues if i.gene_id == g]} for g in ev.statuses]
    _dump(out / "genes.json", {"schema": FLYAOC_SCHEMA, "genes": genes})
    _dump(out / "issues.json", {"schema": FLYAOC_SCHEMA, "issues": [i.to_dict() for i in ev.issues]})
    (out / "report.md").write_text(flyaoc_markdown(ev, summary), encoding="utf-8")
    plot_recall_by_task(ev, out / "recall_by_task.png")
    plot_recall_at_k(ev, out / "recall_at_k.png")
    plot_per_gene(ev, out / "per_gene.png")
    return summary


def flyaoc_markdown(ev: Evaluation, summary: dict[str, Any]) -> str:
    g = summary["genes"]
    lines = [
        "# FlyAOC evaluation",
        "",
        f"Mode: **{ev.mode}**" + (" (FlyAOC evaluator's rules, spec §4)" if ev.mode == "parity"
                                  else " (spec §4.10; not comparable with FlyAOC's published numbers)")
        + f"; missing genes {'counted as failures' if ev.missing_as_failed else 'skipped (as FlyAOC does)'}.",
        f"Ground truth: {summary['inputs'].get('ground_truth')}; predictions: {summary['inputs'].get('predictions')}.",
        f"Genes: {g['in_ground_truth']} in the ground truth, {g['evaluated']} evaluated, {g['ok']} usable, "
        f"{len(g['failed_ids'])} failed, {len(g['invalid_ids'])} unusable files, {len(g['missing_ids'])} missing.",
        "",
        "## Headline metrics",
        "",
        f"Micro recall pools items over genes; macro averages per-gene recall. Intervals: gene bootstrap, "
        f"{ev.bootstrap['n_resamples']} resamples, seed {ev.bootstrap['seed']}, 95% percentile.",
        "",
        "| task | k | canonical | recall micro | 95% CI | recall macro | 95% CI | exact micro | precision micro "
        "| F1 micro | items (ours) | items (paper) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in HEADLINE_TASKS:
        a = ev.aggregate[t]
        lines.append(f"| {TASK_LABELS[t]} | {a['k']} | {a['canonical']} | {_f(a['recall_micro'])} | "
                     f"{_ci(a['ci95']['recall_micro'])} | {_f(a['recall_macro'])} | {_ci(a['ci95']['recall_macro'])} | "
                     f"{_f(a['exact_recall_micro'])} | {_f(a['precision_micro'])} | {_f(a['f1_micro'])} | "
                     f"{a['n_ground_truth']} | {PAPER_DENOMINATORS[t]} |")
    lines += [
        "",
        "The paper states 770 GO and 252 anatomy items; FlyAOC's evaluator, whose numbers parity follows, pools "
        "868 and 364 (unique in-corpus ids per gene, the anatomy set keeping one unmatchable null member for 7 genes). "
        "No per-gene rule yields 770; 252 is the count of distinct non-null anatomy ids pooled across genes. "
        "See docs/evaluation.md.",
        "",
        "## Recall at k (micro / macro)",
        "",
        "| task | " + " | ".join(f"@{k}" for k in ev.k_values) + " |",
        "|---|" + "---|" * len(ev.k_values),
    ]
    for t in TASKS:
        kinds = ["semantic", "exact"] if t in SEMANTIC_TASKS else ["exact"]
        for kind in kinds:
            cells = [f"{ev.aggregate[t]['recall_at_k'][str(k)][f'{kind}_micro']:.4f} / "
                     f"{ev.aggregate[t]['recall_at_k'][str(k)][f'{kind}_macro']:.4f}" for k in ev.k_values]
            lines.append(f"| {TASK_LABELS[t]} {kind} | " + " | ".join(cells) + " |")
    a = ev.aggregate["anatomy"]
    lines += ["", f"Anatomy+stage tuple recall@{a['k']} (ours, not in FlyAOC): micro {_f(a['tuple_recall_micro'])} "
              f"over {a['n_tuples']} (anatomy, stage range) rows.", "", "## Set metrics (no cutoff)", "",
              "| task | TP | FP | FN | P micro | R micro | F1 micro | P macro | R macro | F1 macro |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for t in TASKS:
        s = ev.aggregate[t]["exact_set"]
        lines.append(f"| {TASK_LABELS[t]} exact | {s['tp']} | {s['fp']} | {s['fn']} | {_f(s['precision_micro'])} | "
                     f"{_f(s['recall_micro'])} | {_f(s['f1_micro'])} | {_f(s['precision_macro'])} | "
                     f"{_f(s['recall_macro'])} | {_f(s['f1_macro'])} |")
        if t in SEMANTIC_TASKS:
            s = ev.aggregate[t]["semantic_set"]
            lines.append(f"| {TASK_LABELS[t]} semantic | | | | {_f(s['precision_micro'])} | {_f(s['recall_micro'])} | "
                         f"{_f(s['f1_micro'])} | {_f(s['precision_macro'])} | {_f(s['recall_macro'])} | "
                         f"{_f(s['f1_macro'])} |")
    cov = summary.get("coverage")
    if cov:
        lines += ["", "## Reference coverage", "",
                  f"Source: {cov['source']}. Fraction of curator-cited papers (in-corpus ground-truth rows) that "
                  f"were read: micro {_f(cov['micro'])}, macro {_f(cov['macro'])} over {cov['n_genes']} genes "
                  f"({cov['n_read_cited']} of {cov['n_cited']} papers)."]
    lines += ["", "## Failed, unusable and missing genes", ""]
    for label, key in (("failed (output null)", "failed_ids"), ("unusable file", "invalid_ids"),
                       ("missing file", "missing_ids")):
        lines.append(f"- {label}: {', '.join(g[key]) if g[key] else 'none'}")
    errors = [i for i in ev.issues if i.severity == "error" and i.gene_id in ev.statuses
              and ev.statuses[i.gene_id] != "missing"]
    warnings = [i for i in ev.issues if i.severity == "warning"]
    lines += ["", f"## Problems in prediction files ({len(errors)} errors, {len(warnings)} warnings; "
              "all in issues.json)", ""]
    for i in (errors + warnings)[:50]:
        lines.append(f"- `{i.gene_id}` {i.severity} at `{i.where or '(file)'}`: {i.message}")
    if len(errors) + len(warnings) > 50:
        lines.append(f"- … {len(errors) + len(warnings) - 50} more")
    lines += ["", "Plots: recall_by_task.png, recall_at_k.png, per_gene.png.", ""]
    return "\n".join(lines)


def plot_recall_by_task(ev: Evaluation, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(HEADLINE_TASKS))
    for j, (agg, label) in enumerate((("micro", "micro"), ("macro", "macro"))):
        vals = [ev.aggregate[t][f"recall_{agg}"] for t in HEADLINE_TASKS]
        cis = [ev.aggregate[t]["ci95"][f"recall_{agg}"] or [v, v] for t, v in zip(HEADLINE_TASKS, vals, strict=True)]
        err = np.array([[v - c[0] for v, c in zip(vals, cis, strict=True)],
                        [c[1] - v for v, c in zip(vals, cis, strict=True)]])
        ax.bar(x + (j - 0.5) * 0.38, vals, 0.38, yerr=np.clip(err, 0, None), capsize=4, label=label)
    ax.set_xticks(x, [f"{TASK_LABELS[t]}@{ev.aggregate[t]['k']}\n({ev.aggregate[t]['canonical']})"
                      for t in HEADLINE_TASKS])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("recall")
    ax.set_title(f"FlyAOC recall by task, 95% gene-bootstrap CI ({ev.mode} mode)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_recall_at_k(ev: Evaluation, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    ks = list(ev.k_values)
    for t in HEADLINE_TASKS:
        canon = ev.aggregate[t]["canonical"]
        vals = [ev.aggregate[t]["recall_at_k"][str(k)][f"{canon}_micro"] for k in ks]
        line, = ax.plot(ks, vals, marker="o", label=f"{TASK_LABELS[t]} ({canon})")
        ci = ev.bootstrap["intervals"].get(t, {})
        if ci:
            lo = [ci[str(k)][f"{canon}_micro"][0] for k in ks]
            hi = [ci[str(k)][f"{canon}_micro"][1] for k in ks]
            ax.fill_between(ks, lo, hi, alpha=0.15, color=line.get_color())
        if canon == "semantic":
            ax.plot(ks, [ev.aggregate[t]["recall_at_k"][str(k)]["exact_micro"] for k in ks], linestyle="--",
                    color=line.get_color(), label=f"{TASK_LABELS[t]} (exact)")
    ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("k")
    ax.set_ylabel("micro recall@k")
    ax.set_title("Recall against k (band: 95% gene-bootstrap CI)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_per_gene(ev: Evaluation, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    data = []
    for t in HEADLINE_TASKS:
        k, canon = ev.aggregate[t]["k"], ev.aggregate[t]["canonical"]
        data.append([getattr(ev.scores[g][t], canon)[k] for g in ev.genes])
    if any(data):
        ax.boxplot(data, showfliers=False)
    rng = np.random.default_rng(0)  # fixed jitter: the same input gives the same picture
    for i, vals in enumerate(data, 1):
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(vals)), vals, s=8, alpha=0.5)
    ax.set_xticks(range(1, len(HEADLINE_TASKS) + 1),
                  [f"{TASK_LABELS[t]}@{ev.aggregate[t]['k']}" for t in HEADLINE_TASKS])
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("per-gene recall (canonical)")
    ax.set_title(f"Per-gene recall distribution ({len(ev.genes)} genes)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------
# IR
# ---------------------------------------------------------------------------------------------------------------

def write_ir_report(result: dict[str, Any], out_dir: str | Path) -> None:
    """Write metrics.json, report.md and, when two or more runs exist, per_query_delta.png."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _dump(out / "metrics.json", {k: v for k, v in result.items() if k != "per_query"})
    _dump(out / "per_query.json", result.get("per_query", {}))
    (out / "report.md").write_text(ir_markdown(result), encoding="utf-8")
    if len(result.get("per_query", {})) >= 2:
        plot_per_query_delta(result, out / "per_query_delta.png")


#: failed queries listed by name in report.md (all of them are in metrics.json)
MAX_LISTED_ERRORS = 20


def ir_markdown(result: dict[str, Any]) -> str:
    lines = [f"# IR evaluation: {result['collection']}", "",
             f"{result['n_docs']} documents, {result['n_queries']} judged queries; service collection "
             f"`{result['service_collection']}`.", "",
             "| run | nDCG@10 | Recall@100 | MAP | MRR | queries | status |", "|---|---|---|---|---|---|---|"]
    for name, run in result["runs"].items():
        if run.get("error"):
            lines.append(f"| {name} | – | – | – | – | – | error: {run['error']} |")
        else:
            status = f"ok, {run['n_failed']} failed (scored 0)" if run.get("n_failed") else "ok"
            lines.append(f"| {name} | {run['ndcg@10']:.4f} | {run['recall@100']:.4f} | {run['map']:.4f} | "
                         f"{run['mrr']:.4f} | {run['n_queries']} | {status} |")
    for ref in result.get("published", []):
        cells = [("–" if ref.get(m) is None else f"{ref[m]:.4f}") for m in ("ndcg@10", "recall@100", "map", "mrr")]
        lines.append(f"| published: {ref['source']} | " + " | ".join(cells) + " | | reference |")
    for name, failed in result.get("query_errors", {}).items():
        lines += ["", f"Failed queries of {name} ({len(failed)}; each scores 0, the rest are scored):", ""]
        lines += [f"- {qid}: {msg}" for qid, msg in list(failed.items())[:MAX_LISTED_ERRORS]]
        if len(failed) > MAX_LISTED_ERRORS:
            lines.append(f"- … {len(failed) - MAX_LISTED_ERRORS} more in metrics.json")
    tests = result.get("significance", [])
    if tests:
        lines += ["", f"Paired significance ({result.get('significance_test', 'student')} test, ranx):", ""]
        for t in tests:
            lines.append(f"- {t['metric']}: {t['b']} − {t['a']} = {t['delta']:+.4f}, p = {t['p_value']:.4g}"
                         f"{' (significant at 0.05)' if t['p_value'] < 0.05 else ''}")
    lines.append("")
    return "\n".join(lines)


def plot_per_query_delta(result: dict[str, Any], path: Path, metric: str = "ndcg@10") -> None:
    per_query = result["per_query"]
    names = list(per_query)
    base = names[0]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for other in names[1:]:
        qids = sorted(set(per_query[base]) & set(per_query[other]))
        deltas = sorted(per_query[other][q][metric] - per_query[base][q][metric] for q in qids)
        ax.bar(np.arange(len(deltas)), deltas, width=1.0, alpha=0.6, label=f"{other} − {base}")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("query (sorted by delta)")
    ax.set_ylabel(f"Δ {metric}")
    ax.set_title(f"Per-query {metric} differences, {result['collection']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
