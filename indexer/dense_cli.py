"""``flysift index dense``: embed a collection's published passages into its optional dense (FAISS) index."""

from __future__ import annotations

import json
from pathlib import Path

import click

from search.cli.main import data_dir_option, settings_for
from search.cli.progress import Progress
from search.retrieval.dense import BATCH_SIZE, MODEL_ENV, build_dense


@click.command("dense")
@data_dir_option
@click.option("--collection", default="default", show_default=True)
@click.option("--batch-size", type=int, default=BATCH_SIZE, show_default=True, help="Passages per embedding batch")
@click.option("--model", default=None, help=f"sentence-transformers model folder or name (env {MODEL_ENV}; default: "
                                            "the packaged all-MiniLM-L6-v2)")
@click.option("--no-resume", is_flag=True, help="Discard the embeddings of an interrupted run and start over")
@click.option("--json", "as_json", is_flag=True,
              help="Progress as JSON lines on stderr; end with the index's meta as one JSON line on stdout")
def dense(data_dir: Path | None, collection: str, batch_size: int, model: str | None, no_resume: bool,
          as_json: bool) -> None:
    """Embed the passages of the collection's published build (needs the 'dense' extra). Rerun after each
    `flysift index corpus`: the dense index belongs to one build."""
    settings = settings_for(data_dir)
    with Progress("passages", json_lines=as_json, mininterval=1.0) as progress:
        progress.stage(f"embedding the passages of {collection!r}", collection=collection)
        meta = build_dense(settings.data_dir, collection, batch_size=batch_size, progress=progress.update,
                           model=model, resume=not no_resume)
    rate = f"{meta['passages_per_s']} passages/s" if meta["passages_per_s"] else "nothing to embed"
    click.echo(f"dense index of {collection!r}: {meta['count']} passages, {meta['index']} index, dim {meta['dim']}, "
               f"{meta['seconds']:.1f} s ({rate}), build {meta['build']}", err=True)
    if as_json:
        click.echo(json.dumps(meta))
