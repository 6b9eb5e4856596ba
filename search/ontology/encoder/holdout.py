"""The term encoder's held-out terms as a measurement: their synonyms as queries, an ontology cut so that the
queried terms lose those synonyms, a term service over that cut with the encoder's own label vectors, and the hits
each mode and fusion weight gives.

One home for two users: ``bench/bench_ontology.py --encoder`` publishes the test terms' figures with it, and
``flysift train term-encoder`` chooses each ontology's fusion weight on the dev terms with it (:func:`weight_sweep`,
then :func:`.tuning.choose_weights`), so a fresh encoder serves a tuned weight at once. Only the ontology itself is
read (its names and synonyms): no curated text.

**Strict** reading: every queried term loses all its synonyms in one cut index (names kept), so a query can only be
answered by paraphrase, never by finding itself. **Leave-one-out**: only the queried synonym is removed.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from search.ontology.encoder import artefact, fusion
from search.ontology.encoder.labels import LabelTable
from search.ontology.encoder.tuning import held_out_terms
from search.ontology.model import Ontology
from search.text.analysis import normalise

if TYPE_CHECKING:
    from search.ontology.service import TermService

#: synonyms of one held-out term that may be queries: GO terms with hundreds of synonyms (chemical and EC names)
#: would otherwise fill the sample
PER_TERM = 3
#: GO's dev queries when training tunes the weight (bench_ontology's ``--go-sample`` for its dev runs), and the seed
GO_SAMPLE = 1000
SEED = 13
#: the fusion weights training tries on the dev terms (4 and 6 since the 3-epoch encoder chose GO's 3, then the
#: grid's top; a weight costs one fusion per query, not a search)
WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

#: per query: (query text, the answer's id, the ids returned, best first)
Results = list[tuple[str, str, list[str]]]


def eligible(ont: Ontology) -> list[tuple[str, str]]:
    """``(synonym, term id)`` for the synonyms of live terms, leaving out synonyms that normalise to their term's
    name (trivial). The order is the ontology's, so a seed always draws the same sample."""
    out = []
    for t in ont.terms():
        if t.obsolete:
            continue
        name = normalise(t.name)
        for s in t.synonyms:
            key = normalise(s.text)
            if key and key != name:
                out.append((s.text, t.id))
    return out


def draw(cands: list[tuple[str, str]], sample: int | None, seed: int, avoid: frozenset[str] | set[str] = frozenset()
         ) -> list[tuple[str, str]]:
    """A seeded sample (all when ``sample`` is None), of synonyms whose terms are not in ``avoid``."""
    pool = [c for c in cands if c[1] not in avoid]
    return random.Random(seed).sample(pool, sample) if sample and sample < len(pool) else pool


def capped(cands: list[tuple[str, str]], per_term: int, seed: int) -> list[tuple[str, str]]:
    """At most ``per_term`` of each term's candidates (a seeded draw), in the candidates' order."""
    by_term: dict[str, list[int]] = {}
    for i, (_, tid) in enumerate(cands):
        by_term.setdefault(tid, []).append(i)
    rng = random.Random(seed)
    keep = {i for rows in by_term.values() for i in (rng.sample(rows, per_term) if len(rows) > per_term else rows)}
    return [c for i, c in enumerate(cands) if i in keep]


def queries(ont: Ontology, manifest: dict[str, Any], which: str, go_sample: int = GO_SAMPLE, seed: int = SEED
            ) -> list[tuple[str, str]]:
    """The ``(synonym, term id)`` queries of the encoder's ``which`` terms (dev or test): at most :data:`PER_TERM`
    per term, GO a seeded sample of ``go_sample``, the other ontologies all."""
    held = held_out_terms(manifest, ont.name, which)
    cands = capped([c for c in eligible(ont) if c[1] in held], PER_TERM, seed)
    return draw(cands, go_sample if ont.name == "go" else None, seed)


def cut_ontology(ont: Ontology, drop: dict[str, set[str] | None]) -> Ontology:
    """``ont`` in which term ``tid`` loses the synonyms whose normalised text is in ``drop[tid]`` (all of its
    synonyms when that is None)."""
    def cut(t):  # type: ignore[no-untyped-def]
        if t.id not in drop:
            return t
        keys = drop[t.id]
        return t.model_copy(update={"synonyms": [] if keys is None else
                                    [s for s in t.synonyms if normalise(s.text) not in keys]})
    return Ontology.from_terms(ont.name, [cut(t) for t in ont.terms()], data_version=ont.data_version)


def strict_drop(batch: Iterable[tuple[str, str]]) -> dict[str, set[str] | None]:
    """The cut of the strict reading: every queried term loses all its synonyms."""
    return {tid: None for _, tid in batch}


class LabelRows:
    """An encoder version's label vectors of one ontology, found by (term id, label text): a cut ontology's rows are
    taken from them (the same model embedded them; a cut only removes labels)."""

    def __init__(self, folder: Path, manifest: dict[str, Any], ont: Ontology):
        table = LabelTable.of(ont)
        entry = manifest["ontologies"].get(ont.name)
        if entry is None or entry["digest"] != table.digest:
            raise ValueError(f"the term encoder {manifest['version']} was not trained on this {ont.name} "
                             f"({ont.data_version}): train it on a data dir indexed from the same files")
        self.folder, self.manifest = folder, manifest
        self.vectors = np.load(artefact.vector_paths(folder, ont.name)["vectors"], allow_pickle=False)
        self.row = {(table.ids[t], text.casefold()): r
                    for r, (t, text) in enumerate(zip(table.term, table.texts, strict=True))}

    def write_cut(self, data_dir: Path, cut: Ontology) -> None:
        """A term encoder in ``data_dir`` for ``cut``: the trained model (linked) and the rows of its labels, with the
        fusion weight the version records."""
        from search.ontology.encoder.runtime import write_vectors

        table = LabelTable.of(cut)
        rows = [self.row[(table.ids[t], text.casefold())] for t, text in zip(table.term, table.texts, strict=True)]
        dest = artefact.version_dir(data_dir, self.manifest["version"])
        dest.mkdir(parents=True)
        (dest / artefact.MODEL_DIR).symlink_to(self.folder / artefact.MODEL_DIR)
        (dest / artefact.ONNX_FILE).symlink_to(self.folder / artefact.ONNX_FILE)
        entry = write_vectors(dest, table, np.asarray(self.vectors[rows], dtype=np.float32), hnsw=False)
        entry["fusion_weight"] = self.manifest["ontologies"][cut.name].get("fusion_weight")
        artefact.write_json(dest / artefact.MANIFEST, {**self.manifest, "ontologies": {cut.name: entry}})
        artefact.write_json(artefact.root(data_dir) / artefact.CURRENT, {"version": self.manifest["version"]})


def cut_service(data_dir: Path, ont: Ontology, drop: dict[str, set[str] | None], rows: LabelRows | None
                ) -> TermService:
    """A term service (embedded engine) over a fresh index of ``ont`` cut by ``drop``, with the encoder's vectors of
    the cut (exact search: one matrix product per query) when ``rows`` is given."""
    from search.core.config import Settings
    from search.ontology.encoder.runtime import TermEncoders
    from search.services import Services

    def service() -> TermService:
        return Services.open(Settings(data_dir=data_dir, engine="embedded")).terms

    cut = cut_ontology(ont, drop)
    service().index_ontology(cut)
    if rows is not None:
        rows.write_cut(data_dir, cut)
    svc = service()
    if rows is not None:
        svc.encoders = TermEncoders(data_dir, exact=True)
    return svc


def search_modes(svc: TermService, name: str, batch: Sequence[tuple[str, str]],
                 runs: Sequence[tuple[str, str, float | None]], limit: int = 5) -> dict[str, Results]:
    """Per run ``(label, mode, weight)``, each query's hits as the service ranks them. bm25 and dense runs search
    like any request; the hybrid runs of a query share one gathering of its candidates, fused at each run's weight
    (None: the one the version records), which is what a hybrid search does at that weight."""
    hybrid = [(label, weight) for label, mode, weight in runs if mode == "hybrid"]
    recorded = fusion.weight_of(svc.encoder_of(name), name) if hybrid else fusion.DEFAULT_WEIGHT
    out: dict[str, Results] = {label: [] for label, _, _ in runs}
    for text, tid in batch:
        for label, mode, _ in runs:
            if mode != "hybrid":
                out[label].append((text, tid, [h.id for h in svc.search(name, text, limit=limit, mode=mode).hits]))
        cands = svc.fusion_candidates(name, text, limit) if hybrid else None
        for label, weight in hybrid:
            ids = ([h.id for h in svc.search(name, text, limit=limit, mode="hybrid").hits] if cands is None else
                   [t for t, _ in cands.fuse(recorded if weight is None else weight, limit)])
            out[label].append((text, tid, ids))
    return out


def topk(results: Results) -> dict[str, Any]:
    """Top-1 and top-5 shares of ``results``."""
    n = max(1, len(results))
    return {"n": len(results), "top1": sum(h[:1] == [t] for _, t, h in results) / n,
            "top5": sum(t in h[:5] for _, t, h in results) / n}


def weight_sweep(folder: Path, manifest: dict[str, Any], onts: dict[str, Ontology], work: Path,
                 weights: Sequence[float] = WEIGHTS) -> list[dict[str, Any]]:
    """The strict hybrid figures of each weight on each ontology's dev terms (the rows
    :func:`.tuning.choose_weights` reads), for the version in ``folder`` (published or not)."""
    rows = []
    for name, ont in onts.items():
        if name not in manifest.get("held_out", {}):
            continue
        batch = queries(ont, manifest, "dev")
        if not batch:
            continue
        where = work / f"sweep-{name}"
        try:
            svc = cut_service(where, ont, strict_drop(batch), LabelRows(folder, manifest, ont))
            per = search_modes(svc, name, batch, [(f"hybrid w={w}", "hybrid", w) for w in weights])
        finally:
            shutil.rmtree(where, ignore_errors=True)
        rows.append({"ontology": name, "split": "dev", "reading": "strict", "queries": len(batch),
                     "terms": len({t for _, t in batch}), "modes": {m: topk(v) for m, v in per.items()}})
    return rows
