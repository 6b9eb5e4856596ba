"""The fusion weight of hybrid term search, chosen on the dev terms of an encoder's split and recorded in its
manifest (the weight's one home: :attr:`~.artefact.OntologyEntry.fusion_weight`, read by :func:`.fusion.weight_of`).

The split (labels.split) withholds ``test`` terms (what the benchmark publishes) and ``dev`` terms (what tuning may
look at) from training. Tuning here reads scores measured on dev terms only and refuses anything else: a weight
chosen on the test terms would make the published held-out figures a fit, not a measurement. No CRAFT or FlyAOC
annotation is read at all. ``flysift train term-encoder`` scores a grid of weights on the dev terms
(search.ontology.encoder.holdout.weight_sweep) and writes the choice into the version it publishes (:func:`apply`);
``bench/bench_ontology.py --encoder D --dev --weights 0,0.5,1,2 --record`` does the same for a published version
(:func:`record`), e.g. with another grid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from search.ontology.encoder import artefact

#: the only split tuning may read
TUNING_SPLIT = "dev"
#: ontologies with fewer dev queries than this keep the default weight (FBdv's 8 dev terms say nothing)
MIN_QUERIES = 50


def held_out_terms(manifest: dict[str, Any], name: str, split: str) -> set[str]:
    """The ids the manifest withholds from training as ``split`` (test or dev) for ontology ``name``."""
    return set(manifest.get("held_out", {}).get(name, {}).get(split, []))


def choose_weights(rows: list[dict[str, Any]], default: float) -> dict[str, dict[str, Any]]:
    """Per ontology, the weight whose strict hybrid top-1 + top-5 is highest on the dev terms (ties: the one nearest
    ``default``, then the smaller), with the scores it was chosen from. ``rows`` are the benchmark's hold-out rows
    (``split``, ``ontology``, ``reading``, ``queries`` and ``modes``: ``"hybrid w=<weight>"`` → top1/top5); a row of
    any other split is refused (``ValueError``), never skipped."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("split") != TUNING_SPLIT:
            raise ValueError(f"tuning reads {TUNING_SPLIT} terms only; a row of {str(r.get('split'))[:20]!r} terms "
                             f"({str(r.get('ontology'))[:20]}) was given")
        if r.get("reading") != "strict" or r["queries"] < MIN_QUERIES:
            continue
        grid = {float(m.split("=", 1)[1]): (v["top1"], v["top5"]) for m, v in r["modes"].items()
                if m.startswith("hybrid w=")}
        if not grid:
            continue
        best = max(grid, key=lambda w: (round(sum(grid[w]), 6), -abs(w - default), -w))
        out[r["ontology"]] = {"weight": best, "queries": r["queries"],
                              "dev": {str(w): {"top1": t1, "top5": t5} for w, (t1, t5) in sorted(grid.items())}}
    return out


def record(data_dir: Path | str, chosen: dict[str, dict[str, Any]]) -> str:
    """Write the chosen weights into the current version's manifest (its ontology entries' ``fusion_weight`` and a
    ``fusion`` section saying where they came from), atomically; CURRENT is rewritten too, so a running service
    reloads the encoder with them. Returns the version."""
    version = artefact.current_version(data_dir)
    if version is None:
        raise ValueError(f"{data_dir}: no term encoder to record a fusion weight in")
    folder = artefact.version_dir(data_dir, version)
    _, data = artefact.read_manifest(folder)
    apply(data, chosen)
    artefact.write_json(folder / artefact.MANIFEST, data)
    artefact.write_json(artefact.root(data_dir) / artefact.CURRENT, {"version": version})
    return version


def apply(manifest: dict[str, Any], chosen: dict[str, dict[str, Any]]) -> None:
    """Set the chosen weights in a manifest (its ontology entries' ``fusion_weight``) and a ``fusion`` section saying
    where they came from; ``ValueError`` for an ontology the version lacks or a manifest the service would refuse."""
    for name, c in chosen.items():
        if name not in manifest["ontologies"]:
            raise ValueError(f"the term encoder {manifest['version']} has no ontology {name[:40]!r}")
        manifest["ontologies"][name]["fusion_weight"] = c["weight"]
    manifest["fusion"] = {"tuned_on": TUNING_SPLIT, "objective": "strict hybrid top-1 + top-5", "chosen": chosen}
    artefact.Manifest.model_validate(manifest)   # what the service will read back
