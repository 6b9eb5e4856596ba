"""The term encoder (issue #30): MiniLM fine-tuned on the ontologies' own name/synonym sets (SapBERT's
self-alignment recipe), served as an int8 ONNX query encoder beside per-ontology label vectors, and fused with the
lexical term ranking.

Where things live:

- :mod:`.labels`: what an ontology contributes (its live terms' names and synonyms as one table), the digest that
  ties vectors to one version of those labels, the seeded term-level split (train / dev / test).
- :mod:`.artefact`: the versioned artefact in ``<data_dir>/term-encoder/`` (model, ONNX int8 export, vectors,
  manifest), written atomically and read back checked; nothing in it is a pickle.
- :mod:`.pairs`: the training plan (name/synonym pairs, sibling and mined hard negatives, batches), plain Python.
- :mod:`.config`: the training settings (defaults and bounds), light: the CLI's options read them.
- :mod:`.train`: the training loop (torch and sentence-transformers, the ``dense`` extra; imported only by
  ``flysift train term-encoder``), resumable checkpoints, the export and the held-out metrics.
- :mod:`.runtime`: serving: the ONNX query encoder, the label vectors (exact or HNSW), nearest terms.
- :mod:`.fusion`: the encoder's neighbours fused with the lexical ranking (``mode=hybrid``).
- :mod:`.mf`: the molecular-function rule (an MF answer only for an activity-shaped query).

This package's ``__init__`` imports nothing: the term service asks :func:`present` on every search.
"""

from __future__ import annotations

from pathlib import Path

#: the artefact's folder under the data dir, and the file naming its current version
ROOT = "term-encoder"
CURRENT = "CURRENT"


def present(data_dir: Path | str) -> bool:
    """Whether ``data_dir`` holds a term encoder at all (one ``stat``; whether it fits an ontology is the
    runtime's question)."""
    return (Path(data_dir) / ROOT / CURRENT).is_file()
