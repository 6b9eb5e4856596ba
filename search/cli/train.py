"""``flysift train term-encoder``: fine-tune the term encoder on the data dir's ontologies (search.ontology.encoder).

Progress on stderr as the other long commands give it (a line per stage and a bar on a terminal, nothing but the
epoch lines when piped, JSON lines with ``--json``); the result (version, times, sizes, held-out figures) is one
summary on stdout. Interrupted, it resumes from its checkpoint when run again with the same settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from search.cli.options import data_dir_option, settings_for
from search.ontology.encoder.config import BOUNDS, PRECISIONS, SHARE_BOUNDS, TrainConfig

#: the training's own defaults (one home: search.ontology.encoder.config), shown by --help
DEFAULT = TrainConfig()


def _setting(field: str) -> dict[str, Any]:
    """A TrainConfig field as an option: its default, and its bounds where it has them."""
    kind = click.IntRange(*BOUNDS[field]) if field in BOUNDS else type(getattr(DEFAULT, field))
    return {"type": kind, "default": getattr(DEFAULT, field), "show_default": True}


@click.group("train")
def train() -> None:
    """Train models from the data dir's own data (the term encoder)."""


@train.command("term-encoder")
@data_dir_option
@click.option("--ontologies", default="", help="Comma-separated indexed ontologies to train on [default: all]")
@click.option("--epochs", **_setting("epochs"),
              help="Passes over the pairs (0: export the base model as it is, to measure it)")
@click.option("--seed", **_setting("seed"), help="Seed of the plan and of dropout")
@click.option("--batch-size", **_setting("batch_size"),
              help="Pairs per step (each anchor's in-batch negatives are the others' positives and negatives)")
@click.option("--lr", **_setting("lr"), help="Peak learning rate (AdamW)")
@click.option("--max-pairs-per-term", **_setting("max_pairs_per_term"),
              help="Synonyms of one term used as anchors per epoch (a new draw each epoch)")
@click.option("--frozen-layers", **_setting("frozen_layers"),
              help="Transformer layers left as they are, from the bottom (with the word embeddings)")
@click.option("--max-seq-length", **_setting("max_seq_length"), help="Word pieces per label (training and serving)")
@click.option("--model-negatives", type=click.FloatRange(*SHARE_BOUNDS["model_negative_share"]),
              default=DEFAULT.model_negative_share, show_default=True,
              help="Share of anchors whose hard negative is the model's own nearest wrong term (from epoch 2)")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--precision", type=click.Choice(PRECISIONS), default=DEFAULT.precision, show_default=True,
              help="auto: fp16 on CUDA, bf16 on a CPU with AVX512-BF16, else fp32")
@click.option("--threads", type=click.IntRange(1, 1024), default=None, help="CPU threads [default: every core]")
@click.option("--checkpoint-minutes", type=click.FloatRange(0.1, 1440), default=10.0, show_default=True)
@click.option("--restart", is_flag=True, help="Discard a checkpoint of an interrupted run instead of resuming it")
@click.option("--stop-after-steps", type=click.IntRange(1), default=None,
              help="Stop after this many steps, checkpointed (run again to continue)")
@click.option("--json", "as_json", is_flag=True, help="Progress as JSON lines on stderr, the summary as JSON")
def term_encoder(data_dir: Path | None, ontologies: str, epochs: int, seed: int, batch_size: int, lr: float,
                 max_pairs_per_term: int, frozen_layers: int, max_seq_length: int, model_negatives: float,
                 device: str, precision: str, threads: int | None, checkpoint_minutes: float, restart: bool,
                 stop_after_steps: int | None, as_json: bool) -> None:
    """Fine-tune the packaged MiniLM on the names and synonyms of the indexed ontologies (SapBERT-style
    self-alignment: in-batch and hard negatives), export it to ONNX int8, embed every label and write a new version
    of <data_dir>/term-encoder (term search then fuses it: mode hybrid). Held-out terms (10 % test, 5 % dev, drawn
    by term) are withheld from training; their figures go in the manifest."""
    import os

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch starts OpenMP (train.py says why)
    from search.core.names import check_ontology
    from search.core.progress import Progress
    from search.ontology.encoder.train import Run
    from search.ontology.encoder.train import train as run_training
    from search.services import Services

    settings = settings_for(data_dir)
    names = tuple(check_ontology(n.strip()) for n in ontologies.split(",") if n.strip())
    cfg = TrainConfig(seed=seed, epochs=epochs, batch_size=batch_size, lr=lr, max_pairs_per_term=max_pairs_per_term,
                      frozen_layers=frozen_layers, max_seq_length=max_seq_length, model_negative_share=model_negatives,
                      precision=precision, ontologies=names)
    run = Run(device=device, threads=threads, checkpoint_s=checkpoint_minutes * 60, restart=restart,
              stop_after_steps=stop_after_steps)
    with Progress("batches", json_lines=as_json) as progress:
        result = run_training(Services.open(settings).terms, cfg, run, progress)
    if as_json:
        click.echo(json.dumps({k: v for k, v in result.items() if k != "held_out"}))
        return
    if result.get("stopped"):
        click.echo(f"stopped after step {result['step']:,} (epoch {result['epoch'] + 1}, batch {result['batch']:,}); "
                   "run the same command again to continue")
        return
    t = result["training"]
    click.echo(f"term encoder {result['version']} written to {settings.data_dir / 'term-encoder'}: "
               f"{result['sizes']['total'] / 2 ** 20:.0f} MiB (int8 ONNX {result['sizes']['onnx'] / 2 ** 20:.0f} MiB); "
               f"training {t['seconds'] / 60:.1f} min wall, {t['cpu_seconds'] / 60:.1f} min CPU on {t['device']} "
               f"({t['precision']}, {t['threads']} threads); export + embedding "
               f"{(t['export_seconds'] + t['embed_seconds']) / 60:.1f} min wall")
    for name, m in result["metrics"].items():
        test = m["test"]
        if test.get("queries"):
            click.echo(f"  {name} held-out test terms, encoder alone ({test['queries']:,} synonyms): strict top-1 "
                       f"{test['strict']['top1']:.3f} top-5 {test['strict']['top5']:.3f}; leave-one-out top-1 "
                       f"{test['loo']['top1']:.3f} top-5 {test['loo']['top5']:.3f}")
    chosen = result.get("fusion", {}).get("chosen", {})
    click.echo(f"  hybrid search's fusion weights, chosen on the dev terms in {t.get('tune_seconds', 0) / 60:.1f} min: "
               + (", ".join(f"{name} {c['weight']:g} ({c['queries']:,} queries)" for name, c in chosen.items())
                  or "none (too few dev queries): the default weight serves"))
