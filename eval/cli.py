"""``flysift eval``: FlyAOC curation metrics over a prediction directory, IR metrics over a BEIR collection."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click

from eval import coverage as cov
from eval.flyaoc import DEFAULT_K, HEADLINE_K, MODES, Scorer, evaluate, load_ground_truth, load_predictions
from eval.report import write_flyaoc_report, write_ir_report


def _live(ontology, resolve_alt: bool):
    """Whether an id is a live term that can earn semantic credit (GO resolves alt ids, FBbt does not; §4.4)."""
    def known(term_id: str) -> bool:
        primary = ontology.resolve(term_id) if resolve_alt else (term_id if term_id in ontology else None)
        return primary is not None and not ontology.is_obsolete(primary)
    return known


def ontology_similarities(go_obo: Path, fbbt_obo: Path, fbdv_obo: Path | None = None):
    """Wang similarity for GO and FBbt (search.ontology.model, spec §4.4) and id checks for the prediction parser."""
    from search.ontology.model import Ontology, WangSimilarity

    go, fbbt = Ontology.load(go_obo, "go"), Ontology.load(fbbt_obo, "fbbt")
    similarity = {"go": WangSimilarity(go, "go").sim, "anatomy": WangSimilarity(fbbt, "fbbt").sim}
    known = {"go": _live(go, True), "anatomy": _live(fbbt, False)}
    if fbdv_obo is not None:
        known["stage"] = _live(Ontology.load(fbdv_obo, "fbdv"), True)
    return similarity, known


@click.group("eval")
def eval_group() -> None:
    """Evaluate curation predictions (FlyAOC) or retrieval (BEIR collections)."""


@eval_group.command("flyaoc")
@click.option("--ground-truth", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="FlyAOC ground truth JSONL (one gene per line)")
@click.option("--predictions", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True,
              help="Directory of <gene_id>.json prediction files (output objects or run records)")
@click.option("--go-obo", type=click.Path(exists=True, dir_okay=False, path_type=Path), envvar="FLYSIFT_GO_OBO",
              required=True, help="GO OBO (.obo or .obo.gz; env FLYSIFT_GO_OBO)")
@click.option("--fbbt-obo", type=click.Path(exists=True, dir_okay=False, path_type=Path), envvar="FLYSIFT_FBBT_OBO",
              required=True, help="FBbt OBO (env FLYSIFT_FBBT_OBO)")
@click.option("--fbdv-obo", type=click.Path(exists=True, dir_okay=False, path_type=Path), envvar="FLYSIFT_FBDV_OBO",
              default=None, help="FBdv OBO, only to flag unknown stage ids (env FLYSIFT_FBDV_OBO)")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Report directory")
@click.option("--mode", type=click.Choice(MODES), default="parity", show_default=True,
              help="parity = FlyAOC evaluator's rules; corrected = spec §4.10")
@click.option("--missing-as-failed", is_flag=True, help="Count genes without a file as failures (the paper's rule)")
@click.option("--k", "k_values", default=",".join(map(str, DEFAULT_K)), show_default=True,
              help="Comma-separated recall@k cutoffs")
@click.option("--k-go", type=int, default=HEADLINE_K["go"], show_default=True)
@click.option("--k-anatomy", type=int, default=HEADLINE_K["anatomy"], show_default=True)
@click.option("--k-synonyms", type=int, default=HEADLINE_K["synonyms"], show_default=True)
@click.option("--bootstrap", "n_resamples", type=int, default=1000, show_default=True, help="Gene-bootstrap resamples")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--traces", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Directory of <gene_id>.json session traces for reference coverage (default: evidence fields)")
def flyaoc_cmd(ground_truth: Path, predictions: Path, go_obo: Path, fbbt_obo: Path, fbdv_obo: Path | None, out: Path,
               mode: str, missing_as_failed: bool, k_values: str, k_go: int, k_anatomy: int, k_synonyms: int,
               n_resamples: int, seed: int, traces: Path | None) -> None:
    """Score a FlyAOC prediction directory; writes summary.json, genes.json, issues.json, report.md and plots."""
    try:
        ks = [int(k) for k in k_values.split(",") if k.strip()]
    except ValueError as e:
        raise click.BadParameter(f"not a list of integers: {k_values!r}", param_hint="--k") from e
    similarity, known = ontology_similarities(go_obo, fbbt_obo, fbdv_obo)
    truth = load_ground_truth(ground_truth)
    preds, stray = load_predictions(predictions, truth, known)
    ev = evaluate(truth, preds, Scorer(similarity, k_values=ks, mode=mode),
                  headline_k={"go": k_go, "anatomy": k_anatomy, "synonyms": k_synonyms},
                  missing_as_failed=missing_as_failed, extra_issues=stray, n_resamples=n_resamples, seed=seed)
    if traces is not None:
        coverage = cov.coverage(truth, cov.load_trace_dir(traces, ev.genes), ev.genes, f"session traces in {traces}")
    else:
        coverage = cov.coverage_from_predictions(truth, preds, ev.genes)
    inputs = {"ground_truth": str(ground_truth), "predictions": str(predictions), "go_obo": str(go_obo),
              "fbbt_obo": str(fbbt_obo), "fbdv_obo": str(fbdv_obo) if fbdv_obo else None}
    summary = write_flyaoc_report(ev, out, inputs, coverage)
    for t in ("go", "anatomy", "synonyms"):
        a = summary["tasks"][t]
        click.echo(f"{t}@{a['k']}: recall micro {a['recall_micro']:.4f} macro {a['recall_macro']:.4f} "
                   f"(exact micro {a['exact_recall_micro']:.4f}; n={a['n_ground_truth']})")
    g = summary["genes"]
    click.echo(f"genes evaluated {g['evaluated']}; failed {len(g['failed_ids'])}, unusable {len(g['invalid_ids'])}, "
               f"missing {len(g['missing_ids'])}; report in {out}")


@eval_group.command("ir")
@click.option("--collection", "collection_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              required=True, help="BEIR folder: corpus.jsonl, queries.jsonl, qrels.tsv")
@click.option("--mode", "modes", type=click.Choice(("bm25", "dense", "hybrid")), multiple=True, default=("bm25",),
              show_default=True, help="Retrieval mode; repeat to compare runs with paired tests")
@click.option("--baseline-run", "baselines", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An extra TREC run file to score and compare (name = file stem)")
@click.option("--url", envvar="FLYSIFT_URL", default="http://127.0.0.1:8000", show_default=True,
              help="Service base URL (env FLYSIFT_URL)")
@click.option("--api-key", envvar="FLYSIFT_API_KEY", default=None)
@click.option("--into", "service_collection", default=None,
              help="The service collection to write the documents into (required unless --no-index: eval ir never "
                   "writes into a shared service's namespace on its own); with --no-index the one to read "
                   "(default beir-<folder>)")
@click.option("--no-index", is_flag=True, help="Reuse the collection already published in the service")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Report directory")
@click.option("--json", "as_json", is_flag=True, help="Stages and progress as JSON lines on stderr")
def ir_cmd(collection_dir: Path, modes: tuple[str, ...], baselines: tuple[Path, ...], url: str, api_key: str | None,
           service_collection: str | None, no_index: bool, out: Path, as_json: bool) -> None:
    """Index a BEIR collection through the service (into the collection --into names), run its queries, score with
    ranx; writes metrics.json, per_query.json, TREC run files, report.md and per_query_delta.png. Each stage prints
    a line; on a terminal a bar counts the queries. Needs a running flysift service (--url / FLYSIFT_URL)."""
    from eval.ir import evaluate_collection, service_collection_name
    from search.client import Client, ClientError
    from search.core.extras import require
    from search.core.progress import Progress

    require("ranx", "eval", "flysift eval ir")        # before anything is written into the service
    require("matplotlib", "eval", "the eval ir report")
    if service_collection is None and not no_index:
        raise click.UsageError("eval ir writes the documents into a service collection: name it with --into NAME "
                               f"(e.g. --into {service_collection_name(collection_dir.name)}), or pass --no-index "
                               "to read one already published")
    try:
        with Progress("queries", json_lines=as_json) as progress, Client(url, api_key=api_key) as client:
            client.health()
            counted = _CountingClient(client, progress)

            def log(message: str) -> None:
                counted.stage(message)

            result = evaluate_collection(counted, collection_dir, modes, out_dir=out,
                                         baselines={p.stem: p for p in baselines}, reindex=not no_index, log=log,
                                         collection=service_collection)
            progress.stage(f"writing the report to {out}", always=True, out=str(out))
    except ClientError as e:
        raise click.ClickException(f"[{e.code}] {e.message}") from None
    write_ir_report(result, out)
    click.echo(json.dumps({name: run for name, run in result["runs"].items()}, indent=1))


class _CountingClient:
    """The client, counting paper searches into ``progress`` (the queries of a run; the count restarts at each
    stage, whose line eval.ir logs)."""

    def __init__(self, client: Any, progress: Any):
        self._client, self._progress, self._done = client, progress, 0
        self._total: int | None = None

    def stage(self, message: str) -> None:
        self._progress.close()   # the finished stage's bar
        self._done = 0
        found = re.match(r"querying (\d+) topics", message)
        self._total = int(found.group(1)) if found else None
        self._progress.stage(message, always=True)

    def search_papers(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._client.search_papers(*args, **kwargs)
        finally:
            self._done += 1
            self._progress.update(self._done, self._total)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@click.command("coverage")
@click.option("--ground-truth", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="FlyAOC ground_truth*.jsonl (the curator-cited papers of each gene)")
@click.option("--run-dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="A curate run directory: why each cited paper was or was not used (its traces and predictions)")
@click.option("--ceiling", is_flag=True, help="Without any agent: rank of each indexed cited paper per synonym "
                                             "policy, and recall at budgets 1..64")
@click.option("--policy", "policies", multiple=True, default=("none", "snapshot", "full"), show_default=True,
              type=click.Choice(("none", "snapshot", "registered", "full")),
              help="Synonym policies of the ceiling queries")
@click.option("--depth", type=click.IntRange(1, 10_000), default=cov.RANK_DEPTH, show_default=True,
              help="How deep a query is followed before a paper counts as never retrieved (--run-dir)")
@click.option("--url", envvar="FLYSIFT_URL", default=None,
              help="The flysift service (env FLYSIFT_URL; default: the run's, else http://127.0.0.1:8000)")
@click.option("--api-key", envvar="FLYSIFT_API_KEY", default=None)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Report directory: coverage.json, coverage.md, ceiling.png (when there is something to plot)")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of tables")
def coverage_cmd(ground_truth: Path, run_dir: Path | None, ceiling: bool, policies: tuple[str, ...], depth: int,
                 url: str | None, api_key: str | None, out: Path, as_json: bool) -> None:
    """Reference-coverage diagnostics: for every paper curators cited, why a run did or did not use it
    (not_indexed, never_retrieved, beyond_budget, surfaced_not_read, read_not_annotated, read_and_cited), and
    whether an agent with budget B could have seen it at all (--ceiling). Needs a running flysift service over the
    corpus the run used (--url)."""
    from search.client import Client, ClientError

    if run_dir is None and not ceiling:
        raise click.UsageError("give --run-dir, --ceiling or both")
    truth = load_ground_truth(ground_truth)
    if url is None and run_dir is not None and (run_dir / "run.json").exists():
        url = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("config", {}).get("url")
    url = url or "http://127.0.0.1:8000"
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {}
    md: list[str] = []
    text: list[str] = []
    try:
        with Client(url, api_key=api_key, timeout=120) as client:
            client.health()
            if run_dir is not None:
                rc = report["run"] = cov.run_reasons(client, truth, run_dir, policies, depth)
                counts = ", ".join(f"{r} {rc['totals'][r]} ({rc['shares'][r]:.0%})" for r in cov.REASONS
                                   if rc["totals"][r]) or "none"
                text.append(f"run {run_dir}: {rc['n_genes']} genes, {rc['cited']} cited papers: {counts}")
                md += [f"## Why cited papers were missed: {run_dir}", "", f"Budget {rc['budget']}, synonym policy "
                       f"{rc['synonym_policy']}; a query is followed to rank {rc['depth']}.", "",
                       cov.reasons_table(rc), "", cov.references_table(rc), ""]
                if rc["skipped"]:
                    text.append(f"skipped {len(rc['skipped'])} gene(s): " + "; ".join(
                        f"{g}: {m}" for g, m in list(rc["skipped"].items())[:5]))
            if ceiling:
                ce = report["ceiling"] = cov.retrieval_ceiling(client, truth, policies)
                table = cov.ceiling_table(ce)
                plotted = cov.plot_ceiling(ce, out / "ceiling.png")
                text.append(f"retrieval ceiling: {ce['n_references']} indexed references of {ce['n_genes']} genes "
                            f"({ce['n_not_indexed']} of {ce['n_cited']} cited papers are not indexed; skipped "
                            f"{len(ce['skipped'])})\n{table}\n"
                            + (f"plot: {out / 'ceiling.png'}" if plotted else "no plot: no cited paper is indexed"))
                md += ["## Retrieval ceiling", "", table, ""]
    except ClientError as e:
        raise click.ClickException(f"[{e.code}] {e.message}") from None
    (out / "coverage.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out / "coverage.md").write_text("\n".join(md), encoding="utf-8")
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    for line in text:
        click.echo(line)
    if "run" in report:
        click.echo("\n" + cov.reasons_table(report["run"]))
        click.echo(f"\nper paper: {out / 'coverage.md'}")
