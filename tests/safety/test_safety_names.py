"""Issue #9 item 1: names from requests are data, never paths, and nothing a request can name is unpickled.

The hostile inputs are files in tests/fixtures/bad_inputs/names (one README line each): ``evil.pkl`` runs code when
unpickled (it writes to the file named by ``$FLYSIFT_PWNED_MARKER``), so a test that plants it can see whether it ran.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from search.api.app import create_app
from search.core import names
from search.core.config import Settings
from search.core.errors import FlysiftError, InvalidRequest, NotFound
from search.core.models import Gene
from search.engines.embedded.engine import EmbeddedEngine
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology
from search.ontology.rerank_model import RerankModel
from search.text.lexicon import Lexicon

from helpers import term_service

ROOT = Path(__file__).resolve().parents[2]
FIX = Path(__file__).parents[1] / "fixtures"
BAD = FIX / "bad_inputs" / "names"
EVIL = (BAD / "evil.pkl").read_bytes()
ONTOLOGY_NAMES: list[str] = json.loads((BAD / "ontology_names.json").read_text())
COLLECTION_NAMES: list[str] = json.loads((BAD / "collection_names.json").read_text())


def _sendable(name: str) -> bool:
    """Names an HTTP client can put in a URL (lone surrogates cannot be encoded as UTF-8)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("data")
    cache = tmp_path_factory.mktemp("cache")
    svc = term_service(d)
    for file, name in (("mini.obo", "go"), ("mini_fbbt.obo", "fbbt")):
        svc.index_ontology(Ontology.load(FIX / file, name, cache_dir=cache), TermIndex(d).write)
    Lexicon([Gene(id="FBgn0000490", symbol="dpp", fullname="decapentaplegic")]).save(d / "lexicon.tsv")
    return d


@pytest.fixture(scope="module")
def client(data_dir) -> TestClient:
    return TestClient(create_app(Settings(data_dir=data_dir)))


@pytest.fixture
def marker(tmp_path, monkeypatch) -> Path:
    m = tmp_path / "pwned"
    monkeypatch.setenv("FLYSIFT_PWNED_MARKER", str(m))
    return m


def test_the_planted_pickle_really_runs_code(marker):
    """The corpus file is hostile: unpickling it writes the marker (so the tests below can fail)."""
    pickle.loads(EVIL)
    assert marker.read_text() == "ran"


def test_traversal_to_a_planted_pickle_never_runs_it(client, data_dir, tmp_path, marker):
    """``ontology=../../…/x/evil`` used to be joined into ``ontologies/{name}.pkl`` and unpickled."""
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "evil.pkl").write_bytes(EVIL)
    planted_inside = data_dir / "ontologies" / "evil.pkl"
    planted_inside.write_bytes(EVIL)
    try:
        traversal = os.path.relpath(tmp_path / "x" / "evil", data_dir / "ontologies")
        for name, status in ((traversal, 422), ("evil", 404)):
            for path, q in (("/v1/terms/search", "q"), ("/v1/terms/resolve", "text")):
                r = client.get(path, params={q: "cell", "ontology": name})
                assert r.status_code == status, (name, r.text)
                assert set(r.json()["error"]) == {"code", "message", "details", "request_id"}
        assert not marker.exists()
    finally:
        planted_inside.unlink()


def test_malformed_ontology_names_are_422_never_500(client, data_dir):
    """``ontology=go%00`` was a 500 (embedded null byte); every malformed name is a short 422."""
    for name in filter(_sendable, ONTOLOGY_NAMES):
        r = client.get("/v1/terms/search", params={"q": "cell", "ontology": name})
        assert r.status_code == 422, (name[:50], r.text[:300])
        err = r.json()["error"]
        assert err["code"] == "invalid_request" and len(err["message"]) < 400, name[:50]
    svc = term_service(data_dir)
    for name in ONTOLOGY_NAMES:     # lone surrogates too, which only reach the service from inside the process
        with pytest.raises(InvalidRequest):
            svc.search(name, "cell")
        with pytest.raises(InvalidRequest):
            TermIndex(data_dir).search(name, "cell")


def test_unknown_well_formed_ontology_is_404_with_the_valid_names(client, data_dir):
    r = client.get("/v1/terms/search", params={"q": "cell", "ontology": "nope"})
    assert r.status_code == 404
    assert r.json()["error"]["details"]["valid"] == ["fbbt", "go"]
    r = client.get("/v1/terms/search", params={"q": "stage", "ontology": "fbdv"})   # known to flysift, not indexed
    assert r.status_code == 404 and "flysift index ontology" in r.json()["error"]["message"]
    with pytest.raises(NotFound):
        TermIndex(data_dir).search("nope", "cell")


def test_old_pickles_in_a_data_dir_are_never_loaded(tmp_path, marker):
    """A data dir from before this change (``ontologies/go.pkl``) asks for a re-index and runs nothing."""
    (tmp_path / "ontologies").mkdir()
    (tmp_path / "ontologies" / "go.pkl").write_bytes(EVIL)
    svc = term_service(tmp_path)
    assert svc.names() == []
    with pytest.raises(NotFound) as e:
        svc.search("go", "cell")
    assert "flysift index ontology" in e.value.message and ".pkl" in e.value.message
    assert not marker.exists()


@pytest.mark.parametrize("bad", ["evil.pkl", "garbage.json.gz", "deep.json"])
def test_hostile_ontology_caches_are_rebuilt_from_the_obo(tmp_path, marker, bad):
    obo = tmp_path / "go.obo"
    shutil.copy(FIX / "mini.obo", obo)
    cache = tmp_path / "cache"
    Ontology.load(obo, "go", cache_dir=cache)
    for f in cache.iterdir():                       # whatever the cache wrote, and the old pickle name beside it
        f.write_bytes((BAD / bad).read_bytes())
    (cache / f"{next(cache.iterdir()).name.split('.')[0]}.pkl").write_bytes(EVIL)
    again = Ontology.load(obo, "go", cache_dir=cache)
    assert len(again) == 25 and again.get("GO:0005634").name == "nucleus"
    assert len(Ontology.load(obo, "go", cache_dir=cache)) == 25     # the rewritten cache reads back
    assert not marker.exists()


@pytest.mark.parametrize("bad", ["evil.pkl", "garbage.json.gz", "deep.json"])
def test_a_hostile_served_ontology_file_is_a_clear_error(data_dir, tmp_path, marker, bad):
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)   # the term index is a relative symlink
    svc = term_service(d)
    target = svc.ontology_path("go")
    target.write_bytes((BAD / bad).read_bytes())
    with pytest.raises(FlysiftError) as e:
        svc.search("go", "nucleus")
    assert e.value.status == 503 and "flysift index ontology" in e.value.message and target.name in e.value.message
    assert not marker.exists()


@pytest.mark.parametrize("bad", ["evil.pkl", "garbage.json.gz", "deep.json"])
def test_a_hostile_rerank_model_is_learned_again(data_dir, tmp_path, marker, bad):
    """The re-ranker's saved model used to be a pickle beside the ontology."""
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)   # the term index is a relative symlink
    svc = term_service(d)
    svc.model_path("go").write_bytes((BAD / bad).read_bytes())
    (d / "ontologies" / "go.rerank").write_bytes(EVIL)     # the old model's name
    assert [h.id for h in svc.search("go", "cell nucleus").hits][0] == "GO:0005634"
    assert not marker.exists()


class _Evil:
    """Unpickling this runs the planted payload (the pickle machinery calls ``pickle.loads`` on it)."""

    def __reduce__(self):
        return pickle.loads, (EVIL,)


@pytest.mark.parametrize("how", ["object member", "compressed", "truncated", "member past its end"])
def test_a_mapped_model_file_is_checked_before_use(data_dir, tmp_path, marker, how):
    """The model is read through a memory map of its ``.npz`` (no copy, no CRC pass): a member holding pickled
    objects, a compressed member, a cut file or a member whose header claims more than the file holds is refused
    and the model learned again; nothing is unpickled."""
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    svc = term_service(d)
    path = svc.model_path("go")
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    if how == "object member":
        arrays["weights"] = np.array([_Evil()], dtype=object)
        np.savez(path, **arrays, allow_pickle=True)
    elif how == "compressed":
        np.savez_compressed(path, **arrays)
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[:-200])
    else:
        raw = bytearray(path.read_bytes())
        at = raw.index(b"'shape': (") + len(b"'shape': (")
        raw[at:at + 6] = b"999999"   # a longer array than the member holds (the header's length is unchanged)
        path.write_bytes(bytes(raw))
    assert svc._load_model("go") is None
    assert [h.id for h in svc.search("go", "cell nucleus").hits][0] == "GO:0005634"
    assert not marker.exists()


@pytest.mark.parametrize("field, value", [("stems", 10**9), ("initial_rows", -1), ("idf", {"x": "1"}),
                                          ("vocab", [1, 2]), ("rules", 7), ("terms", 1), ("weights", "x")])
def test_a_model_that_does_not_fit_its_ontology_is_learned_again(data_dir, tmp_path, field, value):
    """A well-formed model file with wrong contents (an index out of range, a string for a number) is not used."""
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    svc = term_service(d)
    model = RerankModel.load(svc.model_path("go"))
    if field in model.arrays:
        column = model.arrays[field].astype(object if isinstance(value, str) else np.int64)
        column[0] = value
        model.arrays[field] = column.astype(str) if isinstance(value, str) else column
    else:
        model.meta[field] = value
    model.save(svc.model_path("go"))
    assert svc._load_model("go") is None
    assert [h.id for h in svc.search("go", "cell nucleus").hits][0] == "GO:0005634"


def test_collection_names_are_checked_before_any_path(tmp_path, client):
    for name in COLLECTION_NAMES:
        with pytest.raises(InvalidRequest):
            EmbeddedEngine(tmp_path, name)
    assert not (tmp_path / "collections").exists()
    r = client.get("/v1/stats", params={"collection": "default\n"})   # `$` let a trailing newline through
    assert r.status_code == 422, r.text


def test_the_patterns_accept_what_the_engines_make(tmp_path):
    from search.engines.cluster.mappings import new_version

    build = EmbeddedEngine(tmp_path, "ir-craft_2").open_build("fp", resume=False)
    try:
        assert names.is_valid("build_id", build.id) and names.is_valid("build_id", new_version())
    finally:
        build.abort()
    assert all(names.is_valid("ontology", n) for n in ("go", "fbbt", "fbdv", "my-onto_2"))
    assert not names.is_valid("build_id", build.id + "\n") and not names.is_valid("build_id", "../" + build.id)
    with pytest.raises(InvalidRequest) as e:
        names.check_ontology("a" * 100_000)
    assert len(e.value.message) < 400


# ---- no pickle loads, ever ----------------------------------------------------------------------------------------

#: module → functions that deserialise with pickle (or can run code the same way)
UNSAFE = {"pickle": {"load", "loads", "Unpickler"}, "_pickle": {"load", "loads", "Unpickler"},
          "cPickle": {"load", "loads", "Unpickler"}, "dill": {"load", "loads"}, "cloudpickle": {"load", "loads"},
          "joblib": {"load"}, "shelve": {"open"}, "marshal": {"load", "loads"}, "pandas": {"read_pickle"},
          "torch": {"load"}}


def unsafe_calls(source: str) -> list[str]:
    """Calls in ``source`` that unpickle: ``pickle.load(…)`` under any alias, names imported from those modules,
    and any call with ``allow_pickle=True``."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}      # local name → module
    funcs: dict[str, str] = {}        # local name → module.function
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top in UNSAFE:
                    modules[a.asname or top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in UNSAFE:
            top = node.module.split(".")[0]
            for a in node.names:
                if a.name in UNSAFE[top]:
                    funcs[a.asname or a.name] = f"{top}.{a.name}"
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in modules \
                and f.attr in UNSAFE[modules[f.value.id]]:
            found.append(f"{modules[f.value.id]}.{f.attr} (line {node.lineno})")
        elif isinstance(f, ast.Name) and f.id in funcs:
            found.append(f"{funcs[f.id]} (line {node.lineno})")
        if any(k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
               for k in node.keywords):
            found.append(f"allow_pickle (line {node.lineno})")
    return found


def test_the_scanner_finds_pickle_loads():
    assert unsafe_calls("import pickle as p\np.loads(b)")
    assert unsafe_calls("from pickle import load as l\nl(fh)")
    assert unsafe_calls("import numpy as np\nnp.load(f, allow_pickle=True)")
    assert not unsafe_calls("import pickle\npickle.dumps(x)\nimport numpy as np\nnp.load(f, allow_pickle=False)")


def test_no_module_loads_a_pickle():
    found = {str(p.relative_to(ROOT)): calls for pkg in ("search", "indexer", "eval", "curation")
             for p in sorted((ROOT / pkg).rglob("*.py")) if (calls := unsafe_calls(p.read_text()))}
    assert found == {}
