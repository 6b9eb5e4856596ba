"""The served ``/openapi.json`` is the contract (issue #9 item 9, "a truthful OpenAPI").

- The document itself: every error status with the one error model (never FastAPI's ``{detail}``), bearer auth only
  on protected routes and only with auth on, the bounds the server enforces.
- The hostile requests of tests/fixtures/bad_inputs/requests/ are answered with a status the document declares for
  their operation and a body of the declared error model.
- schemathesis calls every operation of a real service on loopback, with auth off and with auth on (an admin key),
  and fails on any 5xx, on any answer the document does not declare (status, content type, headers, body schema)
  and on schema-invalid input the service accepts.

The service holds a small corpus (the shared fixture papers plus generated ones), GO and FBbt fixture ontologies and
the bundled gene lexicon. In positive cases, ids schemathesis cannot guess (a session, a paper, a term) are replaced
by real ones, so reads, traces and submissions run against real state, not only into 404s. Build endpoints are
fuzzed too: without a build id (which the fuzzer cannot guess) they only open builds of new collections, so the
served corpus stays as it was.
"""

# ruff: noqa: E402  (schemathesis is imported after the skip that names it when it is absent)
from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis (in the test extra) is not installed")
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from test_safety_inputs import load as load_http

from indexer.synthetic import SyntheticConfig, bundled_genes, generate
from search.api.app import create_app
from search.api.openapi import ERROR_REF, NO_404
from search.core.config import Settings
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology
from search.schema.errors import ErrorResponse
from search.sessions.keys import new_key
from search.text.lexicon import Lexicon

from helpers import PAPERS, LiveServer, build_index, term_service

FIX = Path(__file__).parents[1] / "fixtures"
CORPUS = FIX / "bad_inputs" / "requests"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance, negative_data_rejection]
#: per operation and auth mode (plus schemathesis's coverage cases); derandomized, so a failure reproduces
MAX_EXAMPLES = 25
SEED = 20250109
REAL_PMCID = PAPERS[3].pmcid  # long enough to page with a cursor
REAL_TERM = "GO:0003700"


def service_settings(data: Path, auth: bool) -> Settings:
    return Settings(data_dir=data, auth=auth, rate_limit_per_minute=0)


def served_document(auth: bool) -> dict[str, Any]:
    """The document a service with these settings serves (its data dir does not change it): schemathesis generates
    the tests from it at collection; ``test_the_served_document_is_the_one_fuzzed`` checks the live one."""
    with tempfile.TemporaryDirectory() as tmp:
        return create_app(service_settings(Path(tmp), auth)).openapi()


DOCS = {auth: served_document(auth) for auth in (False, True)}


def operations(doc: dict[str, Any]):
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield method.upper(), path, op


# ---- the document ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("auth", [False, True])
def test_every_error_is_declared_with_the_one_error_model(auth):
    doc = DOCS[auth]
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    assert schemas["ErrorResponse"]["required"] == ["error"]
    for method, path, op in operations(doc):
        errors = {int(s): r for s, r in op["responses"].items() if int(s) >= 400}
        assert {422, 503} <= set(errors), (method, path)
        for status, r in errors.items():
            assert r["content"]["application/json"]["schema"] == {"$ref": ERROR_REF}, (method, path, status)
        if "requestBody" in op:
            assert {400, 413} <= set(errors), (method, path)
        if "{" in path and f"{method} {path}" not in NO_404:
            assert 404 in errors, (method, path)
        assert ({401, 403, 429} <= set(errors)) == (auth and path != "/v1/health"), (method, path)
    assert "409" in doc["paths"]["/v1/papers/{pmcid}"]["get"]["responses"]  # budget_exhausted, session_closed


@pytest.mark.parametrize("auth", [False, True])
def test_bearer_auth_is_declared_only_where_it_applies(auth):
    doc = DOCS[auth]
    assert ("securitySchemes" in doc["components"]) == auth
    for method, path, op in operations(doc):
        protected = auth and path != "/v1/health"
        assert (op.get("security") == [{"HTTPBearer": []}]) == protected, (method, path)


def matches(pattern: str, text: str) -> bool:
    """A JSON Schema pattern as ECMA-262 reads it: ``$`` is the very end (Python's ``$`` allows a newline there)."""
    return re.search(re.sub(r"\$$", r"\\Z", pattern), text) is not None


def test_schemas_carry_the_bounds_the_server_enforces():
    doc, s = DOCS[False], Settings()
    search = doc["components"]["schemas"]["SearchRequest"]["properties"]
    assert (search["query"]["minLength"], search["query"]["maxLength"]) == (1, s.max_query_chars)
    assert (search["limit"]["minimum"], search["limit"]["maximum"]) == (1, s.max_page_size)
    assert search["offset"]["maximum"] == s.max_offset
    params = {(m, p, q["name"]): q["schema"] for m, p, op in operations(doc) for q in op.get("parameters", [])}
    collection = params[("GET", "/v1/stats", "collection")]
    assert matches(collection["pattern"], "default") and not matches(collection["pattern"], "../x")
    ontology = params[("GET", "/v1/terms/search", "ontology")]
    assert matches(ontology["pattern"], "fbbt") and not matches(ontology["pattern"], "../../tmp/x/evil")
    term = params[("GET", "/v1/terms/{term_id}", "term_id")]
    assert matches(term["pattern"], "GO:0003700") and not matches(term["pattern"], "GO:1\n")
    for name in ("query", "q"):   # q: the deprecated alias of query (optional both, so the bound is in anyOf)
        text = params[("GET", "/v1/terms/search", name)]
        strings = [t for t in text.get("anyOf", [text]) if t.get("type") == "string"]
        assert strings and all(t["maxLength"] >= 1 for t in strings)
    assert "X-Session-Id" in {q["name"] for q in doc["paths"]["/v1/passages/search"]["post"]["parameters"]}


# ---- a real service -------------------------------------------------------------------------------------------

def make_data(root: Path) -> Path:
    """A data dir with a small corpus, two fixture ontologies (go, fbbt; no fbdv) and the bundled lexicon."""
    d = root / "data"
    genes = bundled_genes()
    corpus = list(generate(SyntheticConfig(n_papers=12, words_per_paper=300, seed=5, genes=genes)))
    build_index(d, PAPERS + corpus)
    terms = term_service(d)
    for file, name in (("mini.obo", "go"), ("mini_fbbt.obo", "fbbt")):
        terms.index_ontology(Ontology.load(FIX / file, name, cache_dir=root / "obo-cache"), TermIndex(d).write)
    Lexicon(genes).save(d / "lexicon.tsv")
    return d


class Served:
    """A live service on loopback, the headers to call it with, and a real session."""

    def __init__(self, data: Path, auth: bool):
        app = create_app(service_settings(data, auth))
        self.headers: dict[str, str] = {}
        if auth:
            key, record = new_key("fuzzers", ["agent", "admin"], "schemathesis")
            app.state.sessions.store.create_team("fuzzers")
            app.state.sessions.store.add_key(record)
            self.headers = {"Authorization": f"Bearer {key}"}
        self.server = LiveServer(app).__enter__()
        self.url = self.server.url
        self.session_id = self.new_session()

    def new_session(self) -> str:
        r = httpx.post(f"{self.url}/v1/sessions", json={"gene": "dl", "max_papers": 3}, headers=self.headers)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def close(self) -> None:
        self.server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_data(tmp_path_factory.mktemp("contract"))


@pytest.fixture(scope="module")
def served_off(data):
    s = Served(data, auth=False)
    yield s
    s.close()


@pytest.fixture(scope="module")
def served_on(data):
    s = Served(data, auth=True)
    yield s
    s.close()


def test_the_served_document_is_the_one_fuzzed(served_off, served_on):
    for served, auth in ((served_off, False), (served_on, True)):
        assert httpx.get(f"{served.url}/openapi.json").json() == DOCS[auth]


# ---- hostile requests get declared answers --------------------------------------------------------------------

def operation_for(doc: dict[str, Any], method: str, target: str) -> tuple[str, dict[str, Any] | None]:
    """The operation a request reaches: the path with the fewest templates wins (``/papers/search``, not
    ``/papers/{pmcid}``, whatever the method); None when that path does not take the method."""
    path = target.split("?", 1)[0]
    matches = [p for p in doc["paths"] if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", p), path)]
    best = min(matches, key=lambda p: p.count("{"), default=path)
    return best, doc["paths"].get(best, {}).get(method.lower())


CASES = sorted(CORPUS.glob("*.http"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_hostile_request_gets_a_declared_answer(served_off, path):
    method, target, status, code, _, headers, body = load_http(path)
    target = target.replace("{session}", served_off.session_id)
    headers = {k: v.replace("{session}", served_off.session_id) for k, v in headers.items()}
    with httpx.Client(base_url=served_off.url, timeout=30) as http:
        r = http.request(method, httpx.URL(http.base_url.join(target.split("?")[0]),
                                           query=target.partition("?")[2].encode()), content=body, headers=headers)
    assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text[:500]
    ErrorResponse.model_validate(r.json())
    template, op = operation_for(DOCS[False], method, target)
    if op is None:  # a method the path does not take
        assert r.status_code == 405 and r.headers.get("Allow"), (template, r.status_code)
    else:
        declared = op["responses"].get(str(r.status_code))
        assert declared and declared["content"]["application/json"]["schema"] == {"$ref": ERROR_REF}, \
            f"{method} {template} answered {r.status_code}, which the document does not declare"


# ---- schemathesis over every operation ------------------------------------------------------------------------

def with_real_ids(case, served: Served) -> None:
    """In a positive case, name the real session, paper and term instead of ids nobody could guess."""
    meta = case.meta
    if meta is None or meta.generation.mode is not GenerationMode.POSITIVE:
        return
    path = case.path_parameters or {}
    if "session_id" in path:
        closing = case.operation.path.endswith("/close")
        path["session_id"] = served.new_session() if closing else served.session_id
    if "pmcid" in path:
        path["pmcid"] = REAL_PMCID
    if "term_id" in path:
        path["term_id"] = REAL_TERM
    if case.headers and "X-Session-Id" in case.headers:
        case.headers["X-Session-Id"] = served.session_id


def fuzz_schema(doc: dict[str, Any]):
    config = SchemathesisConfig.from_dict({"seed": SEED, "generation": {"max-examples": MAX_EXAMPLES}})
    return schemathesis.openapi.from_dict(doc, config=config)


FUZZ = settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
contract_off, contract_on = fuzz_schema(DOCS[False]), fuzz_schema(DOCS[True])


@pytest.mark.slow
@contract_off.parametrize()
@FUZZ
def test_contract_auth_off(case, served_off):
    with_real_ids(case, served_off)
    case.call_and_validate(base_url=served_off.url, checks=CHECKS)


@pytest.mark.slow
@contract_on.parametrize()
@FUZZ
def test_contract_auth_on(case, served_on):
    with_real_ids(case, served_on)
    case.call_and_validate(base_url=served_on.url, headers=served_on.headers, checks=CHECKS)
