"""The served OpenAPI document, made to say what the service really answers.

FastAPI's own document declares 422 as its ``{detail}`` shape, omits every other error, puts bearer auth on every
route (even ``/v1/health``, even with auth off) and knows none of the bounds the service checks in code. This module
post-processes it in one place, so routes stay plain:

- every error status an operation can answer is declared with the one error model (``ErrorResponse``); FastAPI's
  ``HTTPValidationError``/``ValidationError`` are gone;
- bearer auth is declared only when ``FLYSIFT_AUTH`` is on, and then on every route but the public ones;
- parameters and bodies carry the bounds the server enforces, taken from where each rule lives (the settings, the
  name patterns of ``search.core.names``, the term service's limits), never restated as numbers here; a bound a model or
  route declares itself wins.

``tests/safety/test_openapi_contract.py`` holds the service to this document with schemathesis.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI

from search.api.deps import BEARER_SCHEME, PUBLIC_PATHS
from search.core import names
from search.core.config import Settings
from search.core.names import TREC_NAME
from search.core.query import MAX_FRAGMENT_CHARS, MAX_FRAGMENTS, MAX_TAG_CHARS, MAX_YEAR
from search.retrieval.exports import MEDIA_TYPES
from search.schema.errors import ErrorResponse
from search.sessions.keys import TEAM_NAME
from search.text.term_search import ID_QUERY_RE  # the term service's rule for what a term id looks like

ERROR_REF = "#/components/schemas/ErrorResponse"
SECURITY_SCHEME = "HTTPBearer"
_FASTAPI_ERROR_MODELS = ("HTTPValidationError", "ValidationError")
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}}

#: what each error status means in this API (the description every operation that can answer it shows)
ERRORS: dict[int, tuple[str, dict[str, Any]]] = {
    400: ("The body is not JSON (code invalid_json; details give line and column)", {}),
    401: ("Missing, malformed, unknown or revoked API key (code unauthorized)",
          {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}}),
    403: ("The key lacks the scope this operation needs, or names another team (code forbidden)", {}),
    404: ("Something the request names does not exist or is not visible to the caller: collection, paper, "
          "session (also one named by X-Session-Id), gene, ontology, term or build (code not_found, "
          "session_not_found, gene_not_found, term_hidden, lexicon_missing, …)", {}),
    409: ("The request conflicts with the current state: the session is closed or its reading budget is spent, "
          "the collection is being written, a build may not replace the live one, the dense index is unavailable "
          "(code session_closed, budget_exhausted, busy, build_refused, dense_unavailable, …)", {}),
    413: ("The body is larger than the service accepts (code body_too_large; FLYSIFT_MAX_BODY_BYTES)", {}),
    422: ("Invalid request: a field is missing, of the wrong type, out of bounds or names nothing valid (code "
          "invalid_request or limit_exceeded; details.errors lists the fields)", {}),
    429: ("Rate limit of this key reached (code rate_limited)", _RETRY_AFTER),
    503: ("The engine, index or store cannot answer now; retry later (code unavailable, index_missing)",
          _RETRY_AFTER),
    507: ("Writing the build failed for a reason outside the service: the disk is full (code storage_full); the "
          "failed build's files are removed and the live build keeps serving", {}),
}

#: operations that answer 404 for nothing they name (everything else names a collection, session, term, …)
NO_404 = frozenset({"GET /v1/health", "GET /v1/sessions", "POST /v1/collections/{collection}/builds",
                    "GET /v1/collections"})
#: operations that can answer 409, and why
CONFLICTS: dict[str, str] = {
    "POST /v1/papers/search": "dense_unavailable (mode dense or hybrid without a dense index), rebuild_needed "
                              "(title:/abstract: on a collection built before those fields), concepts_missing "
                              "(term: without the collection's concept index)",
    "GET /v1/papers/search": "dense_unavailable (mode dense or hybrid without a dense index), rebuild_needed "
                             "(title:/abstract: on a collection built before those fields), concepts_missing "
                             "(term: without the collection's concept index)",
    "POST /v1/passages/search": "dense_unavailable (mode dense or hybrid without a dense index), concepts_missing "
                                "(term: without the collection's concept index)",
    "GET /v1/passages/search": "dense_unavailable (mode dense or hybrid without a dense index), concepts_missing "
                               "(term: without the collection's concept index)",
    "GET /v1/terms/search": "dense_unavailable (mode dense or hybrid without a dense term index)",
    "GET /v1/papers/{pmcid}": "budget_exhausted or session_closed (within a session)",
    "GET /v1/papers/{pmcid}/supplements": "supplements_off (a flyaoc-budget session: FlyAOC parity has none)",
    "GET /v1/papers/{pmcid}/supplements/{file}": "supplement_unavailable (the file has nothing to read: missing, "
                                                "unsupported, refused…), budget_exhausted, session_closed or "
                                                "supplements_off (within a session)",
    "POST /v1/collections/{collection}/builds": "busy (the collection already has an open build)",
    "POST /v1/collections/{collection}/builds/{build_id}/publish": "build_refused (empty, or much smaller than the "
                                                                  "live build without allow_shrink; it stays open)",
    "POST /v1/collections/{collection}/dense": "busy or dense_unavailable",
    "POST /v1/sessions/{session_id}/close": "session_closed",
    "POST /v1/sessions/{session_id}/names": "session_closed",
    "POST /v1/sessions/{session_id}/submission": "session_closed",
}
#: operations that write index files, so a full disk reaches them (507)
WRITES_FILES = frozenset({"POST /v1/collections/{collection}/builds",
                          "POST /v1/collections/{collection}/builds/{build_id}/papers",
                          "POST /v1/collections/{collection}/builds/{build_id}/publish",
                          "POST /v1/collections/{collection}/dense"})
#: what any operation with a JSON body can answer before its handler runs (``search.api.guard``): not JSON, too big
BODY_ERRORS = (400, 413)


def _anchored(pattern: str) -> str:
    """A JSON Schema pattern is searched, not matched: anchor it so it means what the server's ``fullmatch`` means."""
    return f"^(?:{pattern})$"


def parameter_bounds(settings: Settings) -> dict[str, dict[str, Any]]:
    """Bounds of query, path and header parameters by name, from the modules that enforce them."""
    term_query = {"minLength": 1, "maxLength": settings.max_query_chars}
    # ``team`` picks whose sessions only with auth off (empty: the caller's own); with auth on it is ignored
    team = {} if settings.auth else {"pattern": f"^(?:{TEAM_NAME.pattern.strip('^$')})?$", "maxLength": 64}
    return {
        "collection": {"pattern": _anchored(names.COLLECTION_PATTERN), "maxLength": 63},
        "ontology": {"pattern": _anchored(names.ONTOLOGY_PATTERN), "maxLength": 32},
        "build_id": {"pattern": _anchored(names.BUILD_ID_PATTERN)},
        "term_id": {"pattern": _anchored(ID_QUERY_RE.pattern.replace(r"\s*", "")), "maxLength": 200},
        "team": team,
        "q": term_query, "text": term_query, "query": term_query,
        # a route that declares its own maximum keeps it (sessions, traces, hierarchy lists, the label export)
        "limit": {"minimum": 1, "maximum": settings.max_page_size},
    }


#: the GET searches: their parameters are the fields of the POST body (``SearchRequest``), bounded the same way
SEARCH_GETS = frozenset({"GET /v1/papers/search", "GET /v1/passages/search"})
#: operations that answer an export (``format``, or an ``Accept`` of a file type) as a file instead of JSON
EXPORTS = SEARCH_GETS | {"POST /v1/papers/search", "POST /v1/passages/search"}


def search_parameter_bounds(settings: Settings) -> dict[str, dict[str, Any]]:
    """Bounds of the GET searches' parameters (beside ``parameter_bounds``)."""
    return {
        "query": {"minLength": 1, "maxLength": settings.max_query_chars},
        "limit": {"minimum": 1, "maximum": settings.max_page_size},
        "offset": {"minimum": 0, "maximum": settings.max_offset},
        "max_hits": {"minimum": 1, "maximum": settings.max_export_hits},
        "year_from": {"minimum": 0, "maximum": MAX_YEAR}, "year_to": {"minimum": 0, "maximum": MAX_YEAR},
        "fragment_size": {"minimum": 20, "maximum": MAX_FRAGMENT_CHARS},
        "number_of_fragments": {"minimum": 0, "maximum": MAX_FRAGMENTS},
        "pre_tag": {"maxLength": MAX_TAG_CHARS}, "post_tag": {"maxLength": MAX_TAG_CHARS},
        "trec_qid": {"pattern": _anchored(TREC_NAME.pattern)}, "run_tag": {"pattern": _anchored(TREC_NAME.pattern)},
    }


def body_bounds(settings: Settings) -> dict[str, dict[str, dict[str, Any]]]:
    """Bounds of request-body properties, by component schema and property."""
    return {
        "SearchRequest": {
            "query": {"minLength": 1, "maxLength": settings.max_query_chars},
            "limit": {"minimum": 1, "maximum": settings.max_page_size},
            "offset": {"minimum": 0, "maximum": settings.max_offset},
            "collection": {"pattern": _anchored(names.COLLECTION_PATTERN), "maxLength": 63},
            "max_hits": {"minimum": 1, "maximum": settings.max_export_hits},
        },
    }


def install(app: FastAPI, settings: Settings) -> None:
    """Serve the truthful document at ``/openapi.json`` (rebuilt only when FastAPI rebuilds its own)."""
    cache: dict[str, Any] = {"source": None, "doc": None}

    def openapi() -> dict[str, Any]:
        source = FastAPI.openapi(app)
        if cache["source"] is not source:
            cache["doc"] = truthful(copy.deepcopy(source), settings)
            cache["source"] = source
        return cache["doc"]

    app.openapi = openapi  # type: ignore[method-assign]


def truthful(doc: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """``doc`` (FastAPI's document) rewritten as the module docstring says."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    err = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(err.pop("$defs", {}))
    schemas["ErrorResponse"] = err
    for name in _FASTAPI_ERROR_MODELS:
        schemas.pop(name, None)
    if settings.auth:
        doc["components"]["securitySchemes"] = {SECURITY_SCHEME: dict(BEARER_SCHEME)}
    else:
        doc["components"].pop("securitySchemes", None)

    pbounds = parameter_bounds(settings)
    sbounds = pbounds | search_parameter_bounds(settings)
    for comp, props in body_bounds(settings).items():
        for prop, bounds in props.items():
            _bound(schemas.get(comp, {}).get("properties", {}).get(prop), bounds)

    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            key = f"{method.upper()} {path}"
            public = path in PUBLIC_PATHS
            for p in op.get("parameters", []):
                _bound(p.get("schema"), (sbounds if key in SEARCH_GETS else pbounds).get(p["name"], {}))
            op["responses"] = {k: v for k, v in op.get("responses", {}).items() if k[0] not in "45"}
            if key in EXPORTS and "200" in op["responses"]:
                content = op["responses"]["200"].setdefault("content", {})
                for media in dict.fromkeys(m.split(";")[0] for m in MEDIA_TYPES.values()):
                    content[media] = {"schema": {"type": "string", "description": "An export (format=…): "
                                                 "docs/search.md, \"Exports\""}}
            for status in sorted(_statuses(key, op, public, settings.auth)):
                op["responses"][str(status)] = _error_response(status, CONFLICTS.get(key) if status == 409 else None)
            if settings.auth and not public:
                op["security"] = [{SECURITY_SCHEME: []}]
            else:
                op.pop("security", None)
    return doc


def _statuses(key: str, op: dict[str, Any], public: bool, auth: bool) -> set[int]:
    out = {422, 503}  # 422: the input guard checks every URL (no NUL), parameters or not
    if op.get("requestBody"):
        out.update(BODY_ERRORS)
    if key not in NO_404:
        out.add(404)
    if key in CONFLICTS:
        out.add(409)
    if key in WRITES_FILES:
        out.add(507)
    if auth and not public:
        out.update((401, 403, 429))
    return out


def _error_response(status: int, why: str | None) -> dict[str, Any]:
    description, headers = ERRORS[status]
    out: dict[str, Any] = {"description": description + (f"; here: {why}" if why else ""),
                           "content": {"application/json": {"schema": {"$ref": ERROR_REF}}}}
    if headers:
        out["headers"] = copy.deepcopy(headers)
    return out


def _bound(schema: dict[str, Any] | None, bounds: dict[str, Any]) -> None:
    """Add ``bounds`` to a parameter or property schema (also inside ``anyOf``, for optional values); bounds the
    model itself declares win."""
    if not schema or not bounds:
        return
    targets = [s for s in schema.get("anyOf", []) if s.get("type") in ("string", "integer")] or [schema]
    for s in targets:
        kind = s.get("type")
        for k, v in bounds.items():
            if (k in ("minimum", "maximum")) == (kind == "integer"):
                s.setdefault(k, v)
