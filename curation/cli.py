"""``flysift curate run|batch|show|eval``: curation agents over a running service, into resumable run directories.

The API key is read from ``--api-key``/``FLYSIFT_API_KEY`` and model keys from the environment only; neither is
written to the run directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from curation.agent import load_agents
from curation.runs import Progress, RunConfig, RunDir, estimate, read_genes, start_run, summarize
from search.client import Client

_POLICIES = ("none", "snapshot", "registered", "full")


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
        click.option("--url", envvar="FLYSIFT_URL", default="http://127.0.0.1:8000", show_default=True),
        click.option("--api-key", envvar="FLYSIFT_API_KEY", default=None, help="flysift API key (never stored)"),
        click.option("--agent", default="lexical", show_default=True,
                     help="lexical, memorization, pipeline, single, multi"),
        click.option("--budget", type=click.IntRange(1, 1000), default=16, show_default=True, help="Papers per gene"),
        click.option("--synonym-policy", type=click.Choice(_POLICIES), default="snapshot", show_default=True),
        click.option("--budget-policy", type=click.Choice(("distinct", "flyaoc")), default="distinct",
                     show_default=True),
        click.option("--hidden", default=None, help="Hidden GO terms: 'flyaoc' or comma-separated ids"),
        click.option("--max-turns", type=int, default=50, show_default=True, help="Model calls per gene"),
        click.option("--max-cost", "max_cost_usd", type=float, default=None, help="USD per gene"),
        click.option("--timeout", "timeout_s", type=float, default=None, help="Seconds per gene"),
        click.option("--parity", is_flag=True, help="FlyAOC's rule: hitting the turn or cost limit yields no output"),
        click.option("-o", "--option", "option_pairs", multiple=True, help="Agent option KEY=VALUE (e.g. model=…)"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _config(kw: dict[str, Any], concurrency: int = 1, batch_max_cost_usd: float | None = None) -> RunConfig:
    agents = load_agents()
    if kw["agent"] not in agents:
        raise click.BadParameter(f"unknown agent {kw['agent']!r}; known: {', '.join(sorted(agents))}",
                                 param_hint="--agent")
    return RunConfig(agent=kw["agent"], budget=kw["budget"], synonym_policy=kw["synonym_policy"],
                     budget_policy=kw["budget_policy"], hidden=kw["hidden"], max_turns=kw["max_turns"],
                     max_cost_usd=kw["max_cost_usd"], timeout_s=kw["timeout_s"], parity=kw["parity"],
                     batch_max_cost_usd=batch_max_cost_usd, concurrency=concurrency, url=kw["url"],
                     options=_options(kw["option_pairs"]))


def _factory(url: str, api_key: str | None):
    return lambda: Client(url, api_key=api_key, timeout=120)


def _run(config: RunConfig, kw: dict[str, Any], genes: list[tuple[str, str]], run_dir: Path, resume: bool,
         retry_failed: bool) -> None:
    try:
        summary = start_run(config, run_dir, genes, _factory(kw["url"], kw["api_key"]), resume=resume,
                            retry_failed=retry_failed, progress=Progress(total=len(genes)))
    except FileExistsError as e:
        raise click.ClickException(str(e)) from e
    except KeyboardInterrupt:
        click.echo(f"interrupted; {run_dir} is consistent: rerun with --resume", err=True)
        sys.exit(130)
    click.echo(json.dumps({k: summary[k] for k in ("genes", "finished", "succeeded", "failed", "missing",
                                                   "usage", "cost_usd", "wall_s") if k in summary}))


@click.group("curate")
def curate() -> None:
    """Run curation agents against a flysift service (see docs/curation.md)."""


@curate.command("run")
@click.option("--gene", "gene_id", required=True, help="FlyBase gene id (FBgn…)")
@click.option("--symbol", default="", help="Current symbol (default: the service's lexicon)")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--resume", is_flag=True)
@_agent_options
def run_cmd(gene_id: str, symbol: str, run_dir: Path, resume: bool, **kw: Any) -> None:
    """Curate one gene into a run directory."""
    _run(_config(kw), kw, [(gene_id, symbol)], run_dir, resume, False)


@curate.command("batch")
@click.option("--genes", "genes_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="FlyAOC genes CSV, a list of FBgn ids (optionally with symbols) or a JSON list")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--concurrency", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--batch-max-cost", "batch_max_cost_usd", type=float, default=None,
              help="Stop starting genes once the batch has spent this many USD")
@click.option("--resume", is_flag=True, help="Skip genes with a prediction")
@click.option("--retry-failed", is_flag=True, help="Rerun genes whose prediction has no output")
@click.option("--dry-run", is_flag=True, help="Estimate papers and cost; run nothing")
@_agent_options
def batch_cmd(genes_file: Path, run_dir: Path, concurrency: int, batch_max_cost_usd: float | None, resume: bool,
              retry_failed: bool, dry_run: bool, **kw: Any) -> None:
    """Curate every gene of a list; Ctrl-C or a kill leaves a directory that --resume continues."""
    genes = read_genes(genes_file)
    config = _config(kw, concurrency, batch_max_cost_usd)
    if dry_run:
        click.echo(json.dumps(estimate(config, genes), indent=1))
        return
    _run(config, kw, genes, run_dir, resume, retry_failed)


@curate.command("show")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def show_cmd(run_dir: Path, as_json: bool) -> None:
    """Summarise a run directory (recomputed from its files, so it is right even after a kill)."""
    run = RunDir(run_dir)
    info = run.config()
    summary = summarize(run, info["genes"])
    if as_json:
        click.echo(json.dumps({"config": info["config"], "summary": summary}, indent=1))
        return
    c = info["config"]
    click.echo(f"agent {c['agent']} · budget {c['budget']} · synonyms {c['synonym_policy']} · "
               f"{summary['finished']}/{summary['genes']} genes finished, {summary['succeeded']} with output, "
               f"{len(summary['failed'])} failed, {len(summary['missing'])} missing")
    u = summary["usage"]
    cost = "unknown" if summary["cost_usd"] is None else f"${summary['cost_usd']:.4f}"
    click.echo(f"papers {u['papers_read']} · turns {u['turns']} · tokens {u['input_tokens']}+{u['output_tokens']} "
               f"· cost {cost}")
    for gid, err in summary["errors"].items():
        click.echo(f"  {gid}: {err}")


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
