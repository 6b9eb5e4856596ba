"""``flysift curate run|batch|show|eval``: curation agents over a running service, into resumable run directories.

The API key is read from ``--api-key``/``FLYSIFT_API_KEY`` and model keys from the environment only; neither is
written to the run directory. A run stops before its first gene, with one line, on a mistake every gene would meet
(no model, a missing extra, an unreachable service, a ``--resume`` of another configuration), and exits non-zero
when genes failed (unless ``--allow-failures``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from curation.agent import ConfigError, load_agents
from curation.runs import GeneRow, Progress, RunConfig, RunDir, estimate, gene_rows, read_genes, start_run, summarize
from search.client import Client, ClientError

_POLICIES = ("none", "snapshot", "registered", "full")
NEEDS_SERVICE = "Needs a running flysift service at --url (FLYSIFT_URL), e.g. `flysift serve --data-dir DATA`."

#: the common model options as real options: (option, agent option key, click type, help)
MODEL_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    ("--model", "model", str, "Model name (LLM agents; env FLYSIFT_LLM_MODEL)"),
    ("--base-url", "base_url", str, "OpenAI-compatible server URL, e.g. http://127.0.0.1:8080/v1 (default: OpenAI)"),
    ("--reader-model", "reader_model", str, "Model of the multi agent's paper readers (default: --model)"),
    ("--temperature", "temperature", float, "Sampling temperature (default: the server's; 1.0 under --parity)"),
    ("--seed", "seed", int, "Sampling seed sent to the model server"),
)


def _options(pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {p!r}", param_hint="--option")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _agent_options(f):
    """The options every run shares (one home for them)."""
    opts = [
        click.option("--url", envvar="FLYSIFT_URL", default="http://127.0.0.1:8000", show_default=True,
                     help="The flysift service (env FLYSIFT_URL)"),
        click.option("--api-key", envvar="FLYSIFT_API_KEY", default=None, help="flysift API key (never stored)"),
        click.option("--agent", default="lexical", show_default=True,
                     help="lexical, memorization, pipeline, single, multi"),
        click.option("--budget", type=click.IntRange(1, 1000), default=16, show_default=True, help="Papers per gene"),
        click.option("--synonym-policy", type=click.Choice(_POLICIES), default="snapshot", show_default=True),
        click.option("--budget-policy", type=click.Choice(("distinct", "flyaoc")), default=None,
                     help="distinct (a paper costs one unit however often it is read) or flyaoc (every full-text "
                          "call costs one); default distinct, flyaoc under --parity"),
        click.option("--hidden", default=None, help="Hidden GO terms: 'flyaoc' or comma-separated ids"),
        click.option("--max-turns", type=int, default=50, show_default=True, help="Model calls per gene"),
        click.option("--max-cost", "max_cost_usd", type=float, default=None, help="USD per gene (cost cap)"),
        click.option("--timeout", "timeout_s", type=float, default=None, help="Seconds per gene"),
        click.option("--parity", is_flag=True, help="FlyAOC's accounting: every full-text call charged, temperature "
                                                    "1.0, its tools, whole papers, its pipeline order and text cut, "
                                                    "no output on a limit (docs/curation.md)"),
        *[click.option(flag, key, type=kind, default=None, help=text) for flag, key, kind, text in MODEL_OPTIONS],
        click.option("-o", "--option", "option_pairs", multiple=True,
                     help="Any other agent option KEY=VALUE (e.g. -o reader_max_turns=8; docs/curation.md)"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _config(kw: dict[str, Any], concurrency: int = 1, batch_max_cost_usd: float | None = None) -> RunConfig:
    agents = load_agents()
    if kw["agent"] not in agents:
        raise click.BadParameter(f"unknown agent {kw['agent']!r}; known: {', '.join(sorted(agents))}",
                                 param_hint="--agent")
    options = _options(kw["option_pairs"])
    for flag, key, _, _ in MODEL_OPTIONS:
        if kw.get(key) is not None:
            if key in options and options[key] != kw[key]:
                raise click.BadParameter(f"{flag} {kw[key]!r} and -o {key}={options[key]!r} disagree; give one",
                                         param_hint=flag)
            options[key] = kw[key]
    return RunConfig(agent=kw["agent"], budget=kw["budget"], synonym_policy=kw["synonym_policy"],
                     budget_policy=kw["budget_policy"], hidden=kw["hidden"], max_turns=kw["max_turns"],
                     max_cost_usd=kw["max_cost_usd"], timeout_s=kw["timeout_s"], parity=kw["parity"],
                     batch_max_cost_usd=batch_max_cost_usd, concurrency=concurrency, url=kw["url"], options=options)


def _factory(url: str, api_key: str | None) -> Callable[[], Client]:
    return lambda: Client(url, api_key=api_key, timeout=120)


def _run(config: RunConfig, kw: dict[str, Any], genes: list[GeneRow], run_dir: Path, resume: bool,
         retry_failed: bool, allow_failures: bool = False, force_config: bool = False) -> None:
    try:
        summary = start_run(config, run_dir, genes, _factory(kw["url"], kw["api_key"]), resume=resume,
                            retry_failed=retry_failed, progress=Progress(total=len(genes)), force_config=force_config)
    except (FileExistsError, ConfigError) as e:
        raise click.ClickException(str(e)) from None
    except ClientError as e:  # the service is unreachable or refuses us: every gene would meet it
        raise click.ClickException(f"[{e.code}] {e.message}") from None
    except KeyboardInterrupt:
        click.echo(f"interrupted; {run_dir} is consistent: rerun with --resume", err=True)
        sys.exit(130)
    click.echo(json.dumps({k: summary[k] for k in ("genes", "finished", "succeeded", "failed", "missing",
                                                   "usage", "cost_usd", "wall_s", "note") if k in summary}))
    bad = len(summary["failed"]) + len(summary["missing"])
    if bad and not allow_failures:
        click.echo(f"{len(summary['failed'])} gene(s) failed and {len(summary['missing'])} did not run (see "
                   f"`flysift curate show {run_dir}`); exit status 1 (--allow-failures: 0)", err=True)
        sys.exit(1)


@click.group("curate")
def curate() -> None:
    """Run curation agents against a flysift service (see docs/curation.md). `run` and `batch` need a running
    service (--url / FLYSIFT_URL); `show` and `eval` read a run directory only."""


@curate.command("run")
@click.option("--gene", "gene_id", required=True, help="FlyBase gene id (FBgn…)")
@click.option("--symbol", default="", help="Current symbol (default: the service's lexicon)")
@click.option("--summary", default="", help="FlyAOC's gene summary, shown to the harnesses that use it")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--resume", is_flag=True)
@click.option("--force-config", is_flag=True, help="Resume a run directory made with another configuration")
@click.option("--allow-failures", is_flag=True, help="Exit 0 even when the gene failed")
@_agent_options
def run_cmd(gene_id: str, symbol: str, summary: str, run_dir: Path, resume: bool, force_config: bool,
            allow_failures: bool, **kw: Any) -> None:
    """Curate one gene into a run directory. Needs a running flysift service (--url)."""
    _run(_config(kw), kw, [GeneRow(gene_id, symbol, summary)], run_dir, resume, False, allow_failures, force_config)


@curate.command("batch")
@click.option("--genes", "genes_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="FlyAOC genes CSV (FBgn_ID,Gene_Symbol,Summary), a list of FBgn ids (optionally with symbols) "
                   "or a JSON list")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--concurrency", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--batch-max-cost", "batch_max_cost_usd", type=float, default=None,
              help="Stop starting genes once the batch has spent this many USD")
@click.option("--resume", is_flag=True, help="Skip genes with a prediction")
@click.option("--retry-failed", is_flag=True, help="Rerun genes whose prediction has no output")
@click.option("--force-config", is_flag=True,
              help="Resume a run directory made with another agent, budget, model or corpus")
@click.option("--allow-failures", is_flag=True, help="Exit 0 even when genes failed")
@click.option("--dry-run", is_flag=True, help="Estimate papers and cost; run nothing")
@_agent_options
def batch_cmd(genes_file: Path, run_dir: Path, concurrency: int, batch_max_cost_usd: float | None, resume: bool,
              retry_failed: bool, force_config: bool, allow_failures: bool, dry_run: bool, **kw: Any) -> None:
    """Curate every gene of a list; Ctrl-C or a kill leaves a directory that --resume continues. Needs a running
    flysift service (--url). Exits 1 when a gene failed (0 with --allow-failures)."""
    genes = read_genes(genes_file)
    config = _config(kw, concurrency, batch_max_cost_usd)
    if dry_run:
        click.echo(json.dumps(estimate(config, genes), indent=1))
        return
    _run(config, kw, genes, run_dir, resume, retry_failed, allow_failures, force_config)


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


@curate.command("show")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The summary and the per-gene rows as JSON")
@click.option("--ground-truth", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="FlyAOC ground truth: add the curator-cited papers read per gene")
def show_cmd(run_dir: Path, as_json: bool, ground_truth: Path | None) -> None:
    """Summarise a run directory (recomputed from its files, so it is right even after a kill): totals and one row
    per gene (status, papers read, turns, tokens, cost, items submitted, papers cited as evidence, error)."""
    run = RunDir(run_dir)
    info = run.config()
    summary = summarize(run, info["genes"])
    cited = None
    if ground_truth is not None:
        from search.flyaoc.groundtruth import load_ground_truth

        cited = {g: set(t.cited_pmcids) for g, t in load_ground_truth(ground_truth).items()}
    rows = gene_rows(run, info["genes"], cited)
    if as_json:
        click.echo(json.dumps({"config": info["config"], "summary": summary, "genes": rows}, indent=1))
        return
    c = info["config"]
    click.echo(f"agent {c['agent']} · budget {c['budget']} · synonyms {c['synonym_policy']} · "
               f"{summary['finished']}/{summary['genes']} genes finished, {summary['succeeded']} with output, "
               f"{len(summary['failed'])} failed, {len(summary['missing'])} missing")
    u = summary["usage"]
    cost = "unknown" if summary["cost_usd"] is None else f"${summary['cost_usd']:.4f}"
    click.echo(f"papers {u['papers_read']} · turns {u['turns']} · tokens {u['input_tokens']}+{u['output_tokens']} "
               f"· cost {cost}\n")
    click.echo(gene_table(rows, refs=cited is not None))


def gene_table(rows: list[dict[str, Any]], refs: bool = False) -> str:
    """The per-gene rows as a Markdown table; columns no gene has a value in are left out."""
    cols = [("gene", "gene_id"), ("symbol", "symbol"), ("status", "status"), ("papers", "papers_read"),
            ("turns", "turns"), ("tokens", "tokens"), ("cost $", "cost"), ("GO", "go_items"),
            ("expr", "expression_items"), ("syn", "synonym_items"), ("cited papers", "evidence_papers")]
    if refs:
        cols.append(("curator refs read", "refs_read"))
    cols.append(("error", "error"))
    shown = [(h, k) for h, k in cols if any(r.get(k) not in (None, "", 0) for r in rows) or k in ("gene_id",
                                                                                                  "status")]
    lines = ["| " + " | ".join(h for h, _ in shown) + " |", "|" + "---|" * len(shown)]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r.get(k)).replace("|", "/")[:80] for _, k in shown) + " |")
    return "\n".join(lines)


@curate.command("eval", context_settings={"ignore_unknown_options": True})
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--ground-truth", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report directory (default RUN_DIR/eval)")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def eval_cmd(run_dir: Path, ground_truth: Path, out: Path | None, extra: tuple[str, ...]) -> None:
    """``flysift eval flyaoc`` over the run's predictions, with its traces for reference coverage (further
    arguments, e.g. --go-obo, are passed on)."""
    cmd = [sys.executable, "-m", "search.cli.main", "eval", "flyaoc", "--ground-truth", str(ground_truth),
           "--predictions", str(run_dir / "predictions"), "--traces", str(run_dir / "traces"),
           "--out", str(out or run_dir / "eval"), *extra]
    sys.exit(subprocess.run(cmd).returncode)
