"""Serving the term encoder, without a trained model (plain Python and numpy): the shared query-vector helper and
its cache, the label vectors' cosines, hybrid search run concurrently or one side after the other, the fusion
weight read from its one home (the manifest) and chosen on dev terms only."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from search.core.models import TermHit
from search.ontology import dense_terms
from search.ontology.encoder import artefact, fusion, tuning
from search.ontology.encoder.runtime import LabelVectors, Loaded
from search.ontology.query_vectors import QueryVectors, dot_rows
from search.ontology.ranking import Label, LexicalRanking


class _Counting:
    """An embedder that counts its calls: a text's vector is seeded by the text (deterministic, not unit length)."""

    def __init__(self, dim: int = 8, delay: float = 0.0):
        self.calls: list[list[str]] = []
        self.dim, self.delay = dim, delay

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if self.delay:
            time.sleep(self.delay)   # a model call: the other side of a hybrid search runs meanwhile
        return np.stack([np.random.default_rng(sum(map(ord, t))).normal(size=self.dim) * 3 for t in texts])


# ---- the query-vector helper ------------------------------------------------------------------------------------

def test_query_vectors_are_unit_read_only_and_cached():
    embed = _Counting()
    queries = QueryVectors(embed, size=2)
    a = queries("cilia formation")
    assert a.dtype == np.float32 and a.shape == (8,) and np.linalg.norm(a) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError):
        a[0] = 1.0                      # a cached row cannot be changed by a caller
    assert queries("cilia formation") is a and len(embed.calls) == 1 and queries.hits == 1
    queries("b")
    queries("c")                        # the cache holds 2: "cilia formation" (least recent) goes
    assert queries.cached("cilia formation") is None and queries.cached("c") is not None
    queries("x" * 600)
    assert queries.cached("x" * 600) is None   # long texts are embedded, not kept
    assert QueryVectors(embed, size=0)("b") is not None and queries.misses == 4


def test_the_dense_term_index_embeds_queries_through_the_shared_helper(tmp_path, monkeypatch):
    embed = _Counting()
    monkeypatch.setattr(dense_terms, "resolve_encoder", lambda device, backend: ("onnx", "cpu", "int8"))
    monkeypatch.setattr(dense_terms, "_encoder", lambda *a: object())
    monkeypatch.setattr(dense_terms, "embed", lambda encoder, texts: embed(texts))
    indexes = dense_terms.DenseTermIndexes(tmp_path)
    index = dense_terms.DenseTerms({"ids": [], "aspects": "", "backend": "onnx", "model": "m", "ontology": "go"},
                                   np.zeros((0, 8), np.float16), np.zeros((0, 3), np.int32))
    v = indexes.query_vector(index, "scent perception")
    assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-6)
    assert indexes.query_vector(index, "scent perception") is v and len(embed.calls) == 1


def test_dot_rows_is_the_matrix_product_on_this_thread():
    rng = np.random.default_rng(3)
    rows, v = rng.normal(size=(300, 8)).astype(np.float32), rng.normal(size=8)
    got = dot_rows(rows, v)
    assert got.dtype == np.float32 and np.allclose(got, rows @ v.astype(np.float32), atol=1e-5)


# ---- label vectors ------------------------------------------------------------------------------------------------

def _vectors(n_terms: int = 40, dim: int = 8, seed: int = 5) -> LabelVectors:
    rng = np.random.default_rng(seed)
    per = rng.integers(0, 4, size=n_terms)          # some terms have no label at all
    rows = np.asarray([(t, k) for t in range(n_terms) for k in range(per[t])], dtype=np.int32).reshape(-1, 2)
    vecs = rng.normal(size=(len(rows), dim))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = [f"GO:{t:07d}" for t in range(n_terms)]
    return LabelVectors(ids, "P" * n_terms, rows, vecs.astype(np.float16))


def test_cosines_are_each_terms_best_label():
    lv = _vectors()
    q = np.random.default_rng(1).normal(size=8).astype(np.float32)
    q /= np.linalg.norm(q)
    asked = [*lv.ids[::3], "GO:9999999"]
    got = lv.cosines(q, asked)
    want = {}
    for tid in asked:
        t = lv.index.get(tid)
        if t is not None and lv.start[t + 1] > lv.start[t]:
            s = lv.vectors[lv.start[t]:lv.start[t + 1]] @ q
            want[tid] = (float(s.max()), int(lv.k[lv.start[t] + int(np.argmax(s))]))
    assert got.keys() == want.keys() and want
    for tid, (c, k) in want.items():
        assert got[tid][0] == pytest.approx(c, abs=1e-5) and got[tid][1] == k


# ---- hybrid search --------------------------------------------------------------------------------------------------

def _manifest(weight: float | None = None) -> artefact.Manifest:
    entry = {"digest": "0" * 32, "terms": 40, "labels": 1, **({"fusion_weight": weight} if weight is not None else {})}
    return artefact.Manifest.model_validate({"format": 1, "kind": artefact.KIND, "version": "te-20261201T000000-"
                                             "00000000", "dim": 8, "max_seq_length": 16, "ontologies": {"go": entry}})


class _Encoder:
    def __init__(self, delay: float = 0.0):
        self.embed = _Counting(delay=delay)
        self.query = QueryVectors(self.embed)


class _Loaded(Loaded):
    """A loaded encoder with a counting embedder instead of the ONNX graph."""

    def __init__(self, manifest: artefact.Manifest, delay: float = 0.0):
        super().__init__(manifest.version, Path("."), manifest, _vectors())
        self._encoder = _Encoder(delay)

    @property
    def encoder(self):   # type: ignore[override]
        return self._encoder


class _Encoders:
    def __init__(self, loaded: Loaded):
        self.loaded = loaded

    def get(self, name, ontology, key):
        return self.loaded


class _Engine:
    def term_hits(self, name, ids, tokens):
        return [TermHit(id=i, ontology=name, name=f"term {i}", score=0.0) for i in ids]


def _lexical(ids: list[str], built: list[str] | None = None):
    """A lexical side ranking ``ids``; the ids whose hits it was asked to build go to ``built``."""
    calls: list[int] = []

    def lexical(depth: int) -> LexicalRanking:
        calls.append(depth)
        hits = [TermHit(id=tid, ontology="go", name=f"term {tid}", score=1.0 - 0.02 * i)
                for i, tid in enumerate(ids[:depth])]

        def build(positions: list[int], scores: list[float]) -> list[TermHit]:
            if built is not None:
                built.extend(hits[i].id for i in positions)
            return [hits[i].model_copy(update={"score": s}) for i, s in zip(positions, scores, strict=True)]
        return LexicalRanking([h.id for h in hits], [h.score for h in hits],
                              label=lambda i: Label(hits[i].name, None), build=build)
    return lexical, calls


def _search(loaded: Loaded, query: str, **kw) -> list[tuple[str, float]]:
    lexical, _ = _lexical(loaded.vectors.ids[5:30])
    hits = fusion.search(_Encoders(loaded), _Engine(), "go", query, 10, {}, "hybrid", lexical=lexical,   # type: ignore[arg-type]
                         ontology=lambda: None, ontology_key=None, **kw)   # type: ignore[arg-type,return-value]
    return [(h.id, h.score) for h in hits]


def test_concurrent_hybrid_search_ranks_as_the_sequential_one():
    for query in ("cilia formation", "scent perception", "aspirin hydrolase activity"):
        concurrent = _search(_Loaded(_manifest()), query, concurrent=True)
        sequential = _search(_Loaded(_manifest()), query, concurrent=False)
        assert concurrent == sequential and len(concurrent) == 10


def test_hybrid_builds_the_hits_it_answers_only():
    """The lexical side is asked 30 deep; only the hits in the answer are built (a hit reads a stored document)."""
    loaded = _Loaded(_manifest())
    built: list[str] = []
    lexical, calls = _lexical(loaded.vectors.ids[5:40], built)
    hits = fusion.search(_Encoders(loaded), _Engine(), "go", "cilia formation", 10, {}, "hybrid",   # type: ignore[arg-type]
                         lexical=lexical, ontology=lambda: None, ontology_key=None)   # type: ignore[arg-type,return-value]
    answered = [h.id for h in hits]
    assert calls == [fusion.LEXICAL_DEPTH] and len(answered) == 10
    assert sorted(built) == sorted(set(answered) & set(loaded.vectors.ids[5:40]))
    assert all(h.name == f"term {h.id}" for h in hits)   # lexical and encoder-only hits read alike


def test_the_query_is_embedded_while_the_lexical_side_ranks():
    """The embedder waits (at most 5 s) for the lexical side to start: it sees it only when the two overlap."""
    import threading

    lexical_started = threading.Event()
    overlapped: list[bool] = []
    loaded = _Loaded(_manifest())
    embed = loaded.encoder.embed

    def waiting_embed(texts: list[str]) -> np.ndarray:
        overlapped.append(lexical_started.wait(timeout=5))
        return embed(texts)

    loaded.encoder.query = QueryVectors(waiting_embed)
    lexical, _ = _lexical(loaded.vectors.ids[5:30])

    def marked(depth: int) -> LexicalRanking:
        lexical_started.set()
        return lexical(depth)

    def run(**kw) -> None:
        fusion.search(_Encoders(loaded), _Engine(), "go", "q", 10, {}, "hybrid", lexical=marked,   # type: ignore[arg-type]
                      ontology=lambda: None, ontology_key=None, **kw)   # type: ignore[arg-type,return-value]

    run()
    assert overlapped == [True] and len(embed.calls) == 1
    run()                               # a cached query is not embedded again (and skips the worker thread)
    assert len(embed.calls) == 1
    loaded.encoder.query.clear()
    lexical_started.clear()
    overlapped.clear()
    loaded.encoder.query = QueryVectors(lambda texts: (overlapped.append(lexical_started.is_set()), embed(texts))[1])
    run(concurrent=False)               # one after the other: the query first, then the lexical side
    assert overlapped == [False]


def test_the_fusion_weight_is_read_from_the_manifest():
    assert fusion.weight_of(_Loaded(_manifest()), "go") == fusion.DEFAULT_WEIGHT
    assert fusion.weight_of(_Loaded(_manifest(0.25)), "go") == 0.25
    lexical_only = _search(_Loaded(_manifest(0.0)), "cilia formation")
    heavy = _search(_Loaded(_manifest(50.0)), "cilia formation")
    assert lexical_only != heavy
    assert [tid for tid, _ in lexical_only][:5] == [f"GO:{t:07d}" for t in range(5, 10)]   # weight 0: lexical order


# ---- the weight chosen on dev terms only -------------------------------------------------------------------------

def _row(split: str, ontology: str, grid: dict[float, tuple[float, float]], queries: int = 200) -> dict:
    return {"split": split, "ontology": ontology, "reading": "strict", "queries": queries,
            "modes": {"bm25": {"top1": 0.5, "top5": 0.6},
                      **{f"hybrid w={w}": {"top1": a, "top5": b} for w, (a, b) in grid.items()}}}


def test_tuning_reads_dev_terms_only_and_picks_the_best_weight():
    grid = {0.5: (0.70, 0.80), 1.0: (0.70, 0.82), 2.0: (0.72, 0.80)}
    with pytest.raises(ValueError, match="dev terms only"):
        tuning.choose_weights([_row("dev", "go", grid), _row("test", "fbbt", grid)], 1.0)
    chosen = tuning.choose_weights([_row("dev", "go", grid), _row("dev", "fbdv", grid, queries=8)], 1.0)
    assert chosen.keys() == {"go"}                      # FBdv's handful of dev queries keep the default
    assert chosen["go"]["weight"] == 1.0                # 1.52 ties 1.52: the one nearest the default
    assert tuning.choose_weights([_row("dev", "go", {**grid, 1.5: (0.75, 0.85)})], 1.0)["go"]["weight"] == 1.5
    manifest = {"held_out": {"go": {"test": ["GO:1"], "dev": ["GO:2", "GO:3"]}}}
    assert tuning.held_out_terms(manifest, "go", "dev") == {"GO:2", "GO:3"}


def test_the_chosen_weight_is_recorded_where_the_runtime_reads_it(tmp_path):
    m = _manifest()
    folder = artefact.version_dir(tmp_path, m.version)
    folder.mkdir(parents=True)
    artefact.write_json(folder / artefact.MANIFEST, {**m.model_dump(), "held_out": {}})
    with pytest.raises(ValueError, match="no term encoder"):
        tuning.record(tmp_path, {"go": {"weight": 0.5}})
    artefact.write_json(artefact.root(tmp_path) / artefact.CURRENT, {"version": m.version})
    before = (artefact.root(tmp_path) / artefact.CURRENT).stat().st_ino
    chosen = tuning.choose_weights([_row("dev", "go", {0.5: (0.8, 0.9), 1.0: (0.7, 0.9)})], 1.0)
    assert tuning.record(tmp_path, chosen) == m.version
    manifest, data = artefact.read_manifest(folder)
    assert manifest.ontologies["go"].fusion_weight == 0.5 and data["fusion"]["tuned_on"] == "dev"
    assert fusion.weight_of(Loaded(m.version, folder, manifest, _vectors()), "go") == 0.5
    assert (artefact.root(tmp_path) / artefact.CURRENT).stat().st_ino != before   # running services reload
    with pytest.raises(ValueError, match="no ontology"):
        tuning.record(tmp_path, {"fbbt": {"weight": 0.5}})
    bad = json.loads((folder / artefact.MANIFEST).read_text())
    bad["ontologies"]["go"]["fusion_weight"] = -1
    (folder / artefact.MANIFEST).write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="fusion_weight"):
        artefact.read_manifest(folder)
