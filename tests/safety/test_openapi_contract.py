"""The served ``/openapi.json`` is the contract (issue #9 item 9, "a truthful OpenAPI").

- The document itself: every error status with the one error model (never FastAPI's ``{detail}``), bearer auth only
  on protected routes and only with auth on, the bounds the server enforces.
- The hostile requests of tests/fixtures/bad_inputs/requests/ are answered with a status the document declares for
  their operation and a body of the declared error model.
- schemathesis calls every operation of a real service on loopback, with auth off and with auth on (an admin key),
  with every check it has (issue #28: 0 failures): no 5xx, no answer the document does not declare (status,
  content type, headers, body schema), schema-invalid input refused, schema-valid input accepted, 405 with the
  documented methods in ``Allow``, missing required headers refused. Signed cursors are left out of valid cases
  (no generator can make one), 413 is an expected answer to any body (the byte limit is not a schema bound), and
  a valid query string that breaks the query language's grammar may be 422 ``query_syntax``.

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
from schemathesis.config import SchemathesisConfig
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance
from test_safety_inputs import load as load_http

from indexer.synthetic import SyntheticConfig, bundled_genes, generate
from search.api.app import create_app
from search.api.deps import PUBLIC_PATHS
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
#: every check schemathesis has (its stateless run's default), with one adjustment: 413 answers a body over the route's
#: byte limit, which JSON Schema cannot state (a schema-valid search with 10,000 pmcid filters of 256 characters is 2.6
#: MB), so it is an expected answer to valid and to invalid data alike
EXPECTED_413 = {"positive_data_acceptance": ["2xx", "3xx", "401", "403", "404", "409", "413", "429", "5xx"],
                "negative_data_rejection": ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422",
                                            "428", "429", "5xx"]}
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
        assert ({401, 403, 429} <= set(errors)) == (auth and path not in PUBLIC_PATHS), (method, path)
    assert "409" in doc["paths"]["/v1/papers/{pmcid}"]["get"]["responses"]  # budget_exhausted, session_closed


@pytest.mark.parametrize("auth", [False, True])
def test_bearer_auth_is_declared_only_where_it_applies(auth):
    doc = DOCS[auth]
    assert ("securitySchemes" in doc["components"]) == auth
    for method, path, op in operations(doc):
        protected = auth and path not in PUBLIC_PATHS
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
    text = params[("GET", "/v1/terms/search", "query")]
    strings = [t for t in text.get("anyOf", [text]) if t.get("type") == "string"]
    assert strings and all(t["maxLength"] >= 1 and not matches(t["pattern"], " \t") for t in strings)
    # query is required; its deprecated alias q still works but is not documented (both at once are refused)
    search = {q["name"]: q for q in doc["paths"]["/v1/terms/search"]["get"]["parameters"]}
    assert search["query"]["required"] and "q" not in search
    assert "X-Session-Id" in {q["name"] for q in doc["paths"]["/v1/passages/search"]["post"]["parameters"]}


def test_session_ids_and_other_names_are_declared_as_the_server_reads_them():
    """Issue #28: ~20 operations answered 422 to schema-valid session ids, term ids of unknown prefixes, names
    ``[""]``."""
    doc = DOCS[False]
    params = [(m, p, q) for m, p, op in operations(doc) for q in op.get("parameters", [])]
    sessions = [q["schema"] for _, _, q in params if q["name"] in ("session_id", "X-Session-Id")]
    assert len(sessions) >= 20
    for s in sessions:
        pattern = next(t for t in s.get("anyOf", [s]) if t.get("type") == "string")["pattern"]
        assert matches(pattern, "ses_abc-DEF_123") and not matches(pattern, "0") and not matches(pattern, "ses_")
    term = next(q["schema"] for m, p, q in params if p == "/v1/terms/{term_id}" and q["name"] == "term_id")
    assert matches(term["pattern"], "FBbt:00004508") and not matches(term["pattern"], "A:0")
    names = doc["components"]["schemas"]["NamesRequest"]["properties"]["names"]
    assert names["minItems"] == 1 and names["items"]["minLength"] == 1 and not matches(names["items"]["pattern"], " ")
    for m, p, q in params:   # no string parameter may carry NUL: the input guard refuses it
        for t in q["schema"].get("anyOf", [q["schema"]]):
            if t.get("type") == "string" and "enum" not in t:
                assert "pattern" in t and not matches(t["pattern"], "a\x00"), (m, p, q["name"])


#: values of the GET searches' (and similar papers') parameters at the edges of what the server takes: the document
#: must take exactly what the server takes (schemathesis found ``gene=`` and ``offset=11298`` declared but refused)
EDGE_VALUES: list[tuple[str, str, str]] = [
    ("/v1/papers/search", "gene", ""), ("/v1/papers/search", "gene", "Dl"), ("/v1/papers/search", "gene", "x" * 201),
    ("/v1/papers/search", "query", " \t"), ("/v1/passages/search", "query", "wing"),
    ("/v1/papers/search", "offset", "10000"), ("/v1/papers/search", "offset", "10001"),
    ("/v1/papers/search", "facets", "year,section"), ("/v1/papers/search", "facets", "year,section,year"),
    ("/v1/papers/search", "facets", "author"), ("/v1/papers/search", "facets", ",year,"),
    ("/v1/papers/search", "section", "results,Methods"), ("/v1/papers/search", "section", "results,bogus"),
    ("/v1/papers/search", "section", ""), ("/v1/papers/search", "section", ",".join([" results\u2003"] * 99)),
    ("/v1/papers/search", "section", "\u3000" * 70 + "Methods"), ("/v1/papers/search", "pmcid", "PMC1," + "x" * 256),
    ("/v1/papers/search", "pmcid", "PMC1," + "x" * 257),
    ("/v1/papers/{pmcid}/similar", "offset", "10000"), ("/v1/papers/{pmcid}/similar", "offset", "10001"),
]


@pytest.mark.parametrize("path, name, value", EDGE_VALUES, ids=[f"{p}-{n}={v[:16]!r}" for p, n, v in EDGE_VALUES])
def test_parameters_are_declared_as_the_server_takes_them(served_off, path, name, value):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema comes with schemathesis")
    schema = next(q["schema"] for q in DOCS[False]["paths"][path]["get"]["parameters"] if q["name"] == name)
    typed: Any = int(value) if value.isdigit() else value
    if "array" in {t.get("type") for t in schema.get("anyOf", [schema])}:
        typed = [value]
    declared = jsonschema.Draft202012Validator(schema).is_valid(typed)
    params = {"query": "wing", name: value}
    r = httpx.get(served_off.url + path.replace("{pmcid}", REAL_PMCID), params=params)
    assert r.status_code != 500
    assert declared == (r.status_code != 422), (declared, r.status_code, r.text[:300])


def test_405_names_the_documented_methods_of_the_path(served_off):
    for method, path in (("OPTIONS", "/v1/papers/search"), ("PUT", "/v1/papers/search"), ("PUT", "/v1/sessions"),
                         ("DELETE", f"/v1/sessions/{served_off.session_id}/submission")):
        r = httpx.request(method, f"{served_off.url}{path}")
        template, _ = operation_for(DOCS[False], method, path)
        documented = sorted(m.upper() for m in DOCS[False]["paths"][template])
        assert r.status_code == 405 and r.headers["Allow"] == ", ".join(documented), (method, path, r.headers)


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
    if case.query and "cursor" in case.query:   # a signed token: no generator can make a valid one
        del case.query["cursor"]
    # year_from <= year_to is a rule across two fields, which JSON Schema cannot state (a body's filters, or the
    # parameters of a GET search)
    for years in (case.body.get("filters") if isinstance(case.body, dict) else None, case.query):
        if isinstance(years, dict) and _year(years.get("year_from")) > _year(years.get("year_to")) >= 0:
            years["year_from"], years["year_to"] = years["year_to"], years["year_from"]
    if "session_id" in path:
        closing = case.operation.path.endswith("/close")
        path["session_id"] = served.new_session() if closing else served.session_id
    if "pmcid" in path:
        path["pmcid"] = REAL_PMCID
    if "term_id" in path:
        path["term_id"] = REAL_TERM
    if case.headers and "X-Session-Id" in case.headers:
        case.headers["X-Session-Id"] = served.session_id


def _year(value: Any) -> int:
    """A year as a case holds it (a body's integer, or a query parameter's integer or digits); -1 for anything else."""
    if isinstance(value, bool):
        return -1
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():   # JSON Schema's integer: 415.0 is one
        return int(value)
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else -1


def fuzz_schema(doc: dict[str, Any]):
    config = SchemathesisConfig.from_dict({"seed": SEED, "generation": {"max-examples": MAX_EXAMPLES},
                                           "checks": {k: {"expected-statuses": v} for k, v in EXPECTED_413.items()}})
    return schemathesis.openapi.from_dict(doc, config=config)


def query_syntax_aside(ctx, response, case):
    """schemathesis' ``positive_data_acceptance``, with one rule of the server that JSON Schema cannot state: a query
    of the query language may break its grammar (an unclosed quote or parenthesis), which is 422 ``query_syntax``
    (documented on the ``query`` field) however valid the string is."""
    if response.status_code == 422 and _error(response) == ("query_syntax", "query"):
        return None
    return positive_data_acceptance(ctx, response, case)


def _error(response) -> tuple[str, str] | None:
    try:
        error = response.json()["error"]
        return error["code"], error["details"]["field"]
    except (ValueError, KeyError, TypeError):
        return None


#: how every case is checked: every check schemathesis has, the acceptance of valid data as ``query_syntax_aside``
CHECKS = {"excluded_checks": [positive_data_acceptance], "additional_checks": [query_syntax_aside]}

FUZZ = settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
contract_off, contract_on = fuzz_schema(DOCS[False]), fuzz_schema(DOCS[True])


@pytest.mark.slow
@contract_off.parametrize()
@FUZZ
def test_contract_auth_off(case, served_off):
    with_real_ids(case, served_off)
    case.call_and_validate(base_url=served_off.url, **CHECKS)


@pytest.mark.slow
@contract_on.parametrize()
@FUZZ
def test_contract_auth_on(case, served_on):
    with_real_ids(case, served_on)
    # the key goes with every case but those whose headers are the invalid part (a missing Authorization among them)
    meta = case.meta
    negative_headers = meta is not None and any(loc is ParameterLocation.HEADER and info.mode is GenerationMode.NEGATIVE
                                                for loc, info in meta.components.items())
    case.call_and_validate(base_url=served_on.url, headers=None if negative_headers else served_on.headers,
                           **CHECKS)
