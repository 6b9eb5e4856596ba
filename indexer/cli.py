"""``flysift index …`` and ``flysift demo`` (registered on the root CLI through entry points)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from indexer.concepts import concepts
from indexer.dense_cli import dense
from indexer.ontologies import ontology
from indexer.pipeline import COMMIT_EVERY, MAX_DEFAULT_WORKERS, POOL_MIN_BYTES, index_corpus, summary_line
from search.cli.options import data_dir_option, settings_for
from search.core.names import DEFAULT_COLLECTION
from search.core.progress import Progress
from search.services import Services


@click.group()
def index() -> None:
    """Load a corpus or an ontology into the index."""


index.add_command(ontology)
index.add_command(dense)
index.add_command(concepts)


@index.command("corpus")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@data_dir_option
@click.option("--format", "fmt", type=click.Choice(["auto", "flyaoc", "jats", "bioc"]), default="auto",
              show_default=True)
@click.option("--id-map", type=click.Path(exists=True, path_type=Path),
              help="TSV of file name, PMCID, PMID for XML files without a PMCID (e.g. CRAFT's craft-idmappings.txt)")
@click.option("--collection", default=DEFAULT_COLLECTION, show_default=True)
@click.option("--strict", is_flag=True, help="Stop at the first bad record instead of reporting it")
@click.option("--no-resume", is_flag=True, help="Start a fresh build even if an interrupted one matches these inputs")
@click.option("--commit-every", type=click.IntRange(min=1), default=COMMIT_EVERY, show_default=True,
              help="Records between commits (the resume points of an interrupted run)")
@click.option("--allow-shrink", is_flag=True,
              help="Publish even when the new build holds less than min_publish_share (default 50%) of the live "
                   "build's papers (an empty build is never published)")
@click.option("--workers", type=click.IntRange(1, 64), default=None,
              help="Processes that parse and prepare records for the one writer; 1 runs everything in this process "
                   "(for debugging) [default: index_workers setting, else the usable cores up to "
                   f"{MAX_DEFAULT_WORKERS}; 1 for inputs under {POOL_MIN_BYTES >> 20} MiB]")
@click.option("--json", "as_json", is_flag=True,
              help="Progress as JSON lines on stderr; end with a one-line JSON summary on stdout")
def corpus(sources: tuple[Path, ...], data_dir: Path | None, fmt: str, id_map: Path | None, collection: str,
           strict: bool, no_resume: bool, commit_every: int, allow_shrink: bool, workers: int | None,
           as_json: bool) -> None:
    """Index papers from FlyAOC exports (JSONL/JSON/Parquet/HF dataset dir), PMC JATS XML or BioC XML/JSON.

    Nothing is published (exit status 2, the live build keeps serving) when the inputs hold no record, every
    record is rejected, or the build is much smaller than the live one; disk full or a read-only data dir end the
    run with one line naming the path and the fix."""
    services = Services.open(settings_for(data_dir))
    warnings: list[str] = []

    with Progress("records", json_lines=as_json) as progress:
        def warn(msg: str) -> None:
            warnings.append(msg)
            if len(warnings) <= 20:
                progress.write(f"warning: {msg}", always=True)

        try:
            summary = index_corpus(list(sources), services, fmt=fmt, id_map=id_map, strict=strict,
                                   resume=not no_resume, collection=collection, commit_every=commit_every,
                                   progress=progress.update, warn=warn, allow_shrink=allow_shrink, workers=workers)
        except KeyboardInterrupt:
            progress.write("interrupted: the build is kept as of its last commit; run the same command again to "
                           "resume it", always=True)
            sys.exit(130)   # the shell's code for a run stopped by Ctrl-C
    if len(warnings) > 20:
        click.echo(f"… and {len(warnings) - 20} more warnings", err=True)
    if summary.resumed_from:
        click.echo(f"resumed an interrupted build after {summary.resumed_from} records", err=True)
    click.echo(f"read {summary.read} · indexed {summary.indexed} papers ({summary.passages} passages) · rejected "
               f"{summary.rejected} · duplicates {summary.duplicates} · {summary.seconds:.1f} s · "
               f"build {summary.build}",
               err=True)
    if summary.rejected:
        click.echo(f"rejects report: {summary.rejects_file}", err=True)
    if as_json:
        click.echo(summary_line(summary))


def _index_ontology_sample(services: Services) -> None:
    """Index the shipped GO/FBbt/FBdv sample (indexer.ontology_sample) so term search and id checks work after demo;
    an ontology already indexed (a full file, or the sample by an earlier demo) is left as it is."""
    from indexer.ontology_sample import sample_files
    from search.ontology.model import Ontology

    service = services.terms
    done, indexed = [], set(service.names())
    for name, path in sample_files().items():
        if name in indexed:
            click.echo(f"{name}: already indexed, left as it is", err=True)
            continue
        n = service.index_ontology(Ontology.load(path, name))
        done.append(f"{name} {n}")
    if done:
        click.echo(f"indexed the ontology sample ({', '.join(done)} terms; index full files with "
                   "`flysift index ontology`)", err=True)


@click.command()
@data_dir_option
@click.option("--papers", type=int, default=300, show_default=True, help="Size of the generated sample corpus")
@click.option("--query", "queries", multiple=True, help="Sample queries to answer (default: a few gene queries)")
@click.option("--serve", is_flag=True, help="Serve the API on the sample index afterwards")
@click.option("--port", type=int, default=8000, show_default=True)
def demo(data_dir: Path | None, papers: int, queries: tuple[str, ...], serve: bool, port: int) -> None:
    """Generate a sample corpus, index it, answer sample queries (and optionally serve it)."""
    from indexer.synthetic import SyntheticConfig, bundled_genes, write_corpus
    from search.text.lexicon import Lexicon

    services = Services.open(settings_for(data_dir))
    settings = services.settings
    sample_dir = Path(settings.data_dir) / "sample"
    info = write_corpus(SyntheticConfig(n_papers=papers), sample_dir)
    click.echo(f"sample corpus: {sample_dir / 'corpus.jsonl'} ({info['papers']} papers, {info['words']} words)",
               err=True)
    # the service loads <data_dir>/lexicon.tsv, so sessions can name the sample's genes (gene=, synonym policies)
    Lexicon(bundled_genes()).save(Path(settings.data_dir) / "lexicon.tsv")
    summary = index_corpus([sample_dir / "corpus.jsonl"], services)
    click.echo(f"indexed {summary.indexed} papers, {summary.passages} passages in {summary.seconds:.1f} s "
               f"into {settings.data_dir}", err=True)
    _index_ontology_sample(services)
    svc = services.search
    for q in queries or ("Su(H)", "Dl", "dl", "abd-A expression"):
        res = svc.search_papers(q, limit=3)
        click.echo(f"\n{q!r}: {res.total} papers ({res.took_ms:.1f} ms)")
        for h in res.hits:
            click.echo(f"  {h.pmcid}  {h.score:6.2f}  {h.title[:90]}")
    if serve:   # the root CLI's serve command, in one process: the indexer itself needs no HTTP layer
        from search.cli.main import serve as serve_command

        click.get_current_context().invoke(serve_command, data_dir=settings.data_dir, host="127.0.0.1", port=port,
                                           workers=1, access_log=False)
    else:
        click.echo(f"\nnext: flysift serve --data-dir {settings.data_dir}   (or: flysift demo --serve)", err=True)
