"""``flysift index dense``: embed a collection's published passages into its optional dense (FAISS) index."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from search.cli.options import data_dir_option, settings_for
from search.core.names import DEFAULT_COLLECTION
from search.core.progress import Progress
from search.engines.dense import (
    BACKEND_ENV,
    BACKENDS,
    BATCH_SIZE,
    CUDA_BATCH_SIZE,
    DEVICE_ENV,
    DEVICES,
    MODEL_ENV,
    build_dense,
)
from search.services import Services


@click.command("dense")
@data_dir_option
@click.option("--collection", default=DEFAULT_COLLECTION, show_default=True)
@click.option("--device", type=click.Choice(DEVICES), envvar=DEVICE_ENV, default="auto", show_default=True,
              help=f"cuda when torch sees a GPU, else cpu (env {DEVICE_ENV}); an absent cuda is an error")
@click.option("--backend", type=click.Choice(BACKENDS), envvar=BACKEND_ENV, default="auto", show_default=True,
              help=f"auto: torch float16 on cuda; onnx-int8 (ONNX Runtime) on cpu, torch where onnxruntime is "
                   f"missing (env {BACKEND_ENV})")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help=f"Passages per embedding batch  [default: {BATCH_SIZE} on cpu, {CUDA_BATCH_SIZE} on cuda]")
@click.option("--model", default=None, help=f"sentence-transformers model folder or name (env {MODEL_ENV}; default: "
                                            "the packaged all-MiniLM-L6-v2)")
@click.option("--no-resume", is_flag=True, help="Discard the embeddings of an interrupted run and start over")
@click.option("--json", "as_json", is_flag=True,
              help="Progress as JSON lines on stderr; end with the index's meta as one JSON line on stdout")
def dense(data_dir: Path | None, collection: str, device: str, backend: str, batch_size: int | None,
          model: str | None, no_resume: bool, as_json: bool) -> None:
    """Embed the passages of the collection's published build (needs the 'dense' extra). Rerun after each
    `flysift index corpus`: the dense index belongs to one build."""
    services = Services.open(settings_for(data_dir))
    with Progress("passages", json_lines=as_json, mininterval=1.0) as progress:
        progress.stage(f"embedding the passages of {collection!r}", collection=collection)

        def announce(info: dict[str, Any]) -> None:
            progress.stage(f"encoder: {info['backend']} on {info['device']} ({info['dtype']}), batches of "
                           f"{info['batch_size']}, {info['threads']} CPU threads", always=True, **info)

        meta = build_dense(services.engine(collection), services.settings.data_dir, batch_size=batch_size,
                           progress=progress.update, model=model, resume=not no_resume, device=device,
                           backend=backend, announce=announce)
    rate = f"{meta['passages_per_s']} passages/s" if meta["passages_per_s"] else "nothing to embed"
    on = f" with {meta['backend']} on {meta['device']} ({meta['dtype']})" if "backend" in meta else ""
    click.echo(f"dense index of {collection!r}: {meta['count']} passages, {meta['index']} index, dim {meta['dim']}, "
               f"{meta['seconds']:.1f} s ({rate}){on}, build {meta['build']}", err=True)
    if as_json:
        click.echo(json.dumps(meta))
