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
from search.core.inputs import INT64_MAX, INT64_MIN, MAX_STRING_CHARS
from search.core.names import TREC_NAME
from search.core.query import MAX_FILTER_PMCID_CHARS, MAX_FRAGMENT_CHARS, MAX_FRAGMENTS, MAX_TAG_CHARS, MAX_YEAR
from search.ontology.model import GO_ASPECTS, KNOWN, KNOWN_RELATIONS, RELATION_SETS
from search.retrieval.cursors import MAX_CURSOR_CHARS
from search.retrieval.exports import MEDIA_TYPES
from search.retrieval.service import FACETS, VALID_SECTIONS
from search.schema.errors import ErrorResponse
from search.schema.hidden import NAMED_SETS
from search.schema.sessions import MAX_GENE_REF_CHARS
from search.sessions.keys import TEAM_NAME
from search.sessions.models import SESSION_ID

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
    507: ("A write failed for a reason outside the service: the disk is full (code storage_full). Nothing of the "
          "call was recorded or charged; a failed build's files are removed and the live build keeps serving", {}),
}

#: operations that answer 404 for nothing they name (everything else names a collection, session, term, …)
NO_404 = frozenset({"GET /v1/health", "GET /v1/ready", "GET /metrics", "GET /v1/sessions",
                    "POST /v1/collections/{collection}/builds", "GET /v1/collections"})
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
    "GET /v1/sessions/{session_id}/coverage": "ground_truth_missing (no pmcids given and no FlyAOC ground truth "
                                              "loaded)",
}
#: operations that never write (a full disk cannot reach them); every other one writes the session store (a session
#: call's trace, a session, names, a submission), an index or the cursor secret, so it may answer 507
NO_WRITES = frozenset({"GET /v1/health", "GET /v1/ready", "GET /metrics"})
#: what any operation with a JSON body can answer before its handler runs (``search.api.guard``): not JSON, too big
BODY_ERRORS = (400, 413)


#: operations whose parameters the document requires although the route reads them as optional (``query`` of term
#: search: its deprecated alias ``q``, left out of the document, may stand in for it)
REQUIRED_PARAMS: dict[str, frozenset[str]] = {"GET /v1/terms/search": frozenset({"query"})}

# Request text as the document states it, in patterns that ECMA-262 (JSON Schema), jsonschema-rs and Python's ``re``
# read alike. No request string may hold NUL (the input guard refuses it: 422); where the server strips and refuses
# an empty value, a non-blank one, with whitespace spelled out as ``str.strip`` removes it (``\s`` differs between
# the three engines).
TEXT = "^[^\\u0000]*$"
WHITESPACE = ("\\t\\n\\u000b\\u000c\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028"
              "\\u2029\\u202f\\u205f\\u3000")
NON_BLANK = f"^[^\\u0000]*[^\\u0000{WHITESPACE}][^\\u0000]*$"
#: ``hidden``: comma-separated named sets and term ids (anything with a colon); empty items are skipped
_HIDDEN_ITEM = f"(?:[^,\\u0000]*:[^,\\u0000]*|[{WHITESPACE}]*(?:{'|'.join(NAMED_SETS)})?[{WHITESPACE}]*)"
HIDDEN = f"^{_HIDDEN_ITEM}(?:,{_HIDDEN_ITEM})*$"
#: ``relations``: a relation set, or comma-separated relation names the service knows
_RELATION = "(?:" + "|".join(KNOWN_RELATIONS) + ")"
RELATIONS = "^(?:" + "|".join(k.replace("+", "\\+") for k in RELATION_SETS) + f"|{_RELATION}(?:,{_RELATION})*)$"
#: ``aspect``: P, F or C (or the GO namespace's name), or empty for none
ASPECT = "^(?:|P|F|C|p|f|c|" + "|".join(GO_ASPECTS) + ")$"
#: ``sections`` of a paper read: comma-separated section names (any case: the server upper-cases them), empty items
#: skipped
_SECTION = "(?:" + "|".join("".join(f"[{c}{c.lower()}]" if c.isalpha() else c for c in s) for s in VALID_SECTIONS) + ")"
_SECTION_ITEM = f"[{WHITESPACE}]*(?:{_SECTION}[{WHITESPACE}]*)?"
SECTIONS = f"^{_SECTION_ITEM}(?:,{_SECTION_ITEM})*$"
#: ``pmcids`` of a coverage request: comma-separated paper ids
_PMCID_ITEM = f"[{WHITESPACE}]*(?:(?:{names.PAPER_ID_PATTERN})[{WHITESPACE}]*)?"
PMCIDS = f"^{_PMCID_ITEM}(?:,{_PMCID_ITEM})*$"
#: the GET searches' comma-separated lists, item by item as the POST body takes them (empty items skipped):
#: ``pmcid`` filters of up to 256 characters, ``facets`` by name (repeats are one facet)
_FILTER_PMCID = f"[^,\\u0000]{{0,{MAX_FILTER_PMCID_CHARS}}}"
FILTER_PMCIDS = f"^{_FILTER_PMCID}(?:,{_FILTER_PMCID})*$"
_FACET = "(?:|" + "|".join(FACETS) + ")"
FACET_LIST = f"^{_FACET}(?:,{_FACET})*$"
#: what a term id of a known ontology looks like (ids of other indexed ontologies are served, not documented)
TERM_ID = "^(?:" + "|".join(s.id_pattern.replace("\\d", "[0-9]") for s in KNOWN.values()) + ")$"
#: a free-form JSON body (a FlyAOC prediction) as the input guard bounds it
JSON_VALUE = "JsonValue"


def _anchored(pattern: str) -> str:
    """A JSON Schema pattern is searched, not matched: anchor it so it means what the server's ``fullmatch`` means."""
    return f"^(?:{pattern})$"


#: rules across properties that a model checks in code, stated in JSON Schema
SCHEMA_RULES: dict[str, dict[str, Any]] = {
    # ontologies or task, not both (either may be null)
    "RecogniseRequest": {"not": {"required": ["ontologies", "task"],
                                 "properties": {"ontologies": {"type": "array"}, "task": {"type": "string"}}}},
}

#: levels of nesting the document spells out in ``JsonValue`` (generators do not follow recursive references)
JSON_VALUE_LEVELS = 4


def json_value_schema(levels: int = JSON_VALUE_LEVELS) -> dict[str, Any]:
    """A JSON value the input guard accepts: text without NUL, 64-bit integers, numbers, booleans, null, and arrays
    and objects of them, spelt out ``levels`` deep (the guard takes 32)."""
    scalars: list[dict[str, Any]] = [{"type": "string", "pattern": TEXT, "maxLength": MAX_STRING_CHARS},
                                     {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX},
                                     {"type": "number"}, {"type": "boolean"}, {"type": "null"}]
    value: dict[str, Any] = {"anyOf": scalars}
    for _ in range(levels - 1):
        value = {"anyOf": [*scalars, {"type": "array", "items": value},
                           {"type": "object", "additionalProperties": value, "propertyNames": {"pattern": TEXT}}]}
    return {**value, "title": JSON_VALUE,
            "description": "Any JSON value without NUL characters (the document spells out "
                           f"{JSON_VALUE_LEVELS} levels; the service takes values nested up to 32 deep)"}


def parameter_bounds(settings: Settings) -> dict[str, dict[str, Any]]:
    """Bounds of query, path and header parameters by name, from the modules that enforce them."""
    term_query = {"minLength": 1, "maxLength": settings.max_query_chars, "pattern": NON_BLANK}
    # ``team`` picks whose sessions only with auth off (empty: the caller's own); with auth on it is ignored
    team = {} if settings.auth else {"pattern": f"^(?:{TEAM_NAME.pattern.strip('^$')})?$", "maxLength": 64}
    session = {"pattern": _anchored(SESSION_ID.pattern), "maxLength": 68}
    return {
        "collection": {"pattern": _anchored(names.COLLECTION_PATTERN), "maxLength": 63},
        "ontology": {"pattern": _anchored(names.ONTOLOGY_PATTERN), "maxLength": 32},
        "build_id": {"pattern": _anchored(names.BUILD_ID_PATTERN)},
        "term_id": {"pattern": TERM_ID, "maxLength": 200},
        "pmcid": {"pattern": _anchored(names.PAPER_ID_PATTERN), "maxLength": names.MAX_PAPER_ID_CHARS},
        "cursor": {"maxLength": MAX_CURSOR_CHARS},
        "session_id": session, "X-Session-Id": session,
        "hidden": {"pattern": HIDDEN},
        "relations": {"pattern": RELATIONS},
        "sections": {"items": {"pattern": SECTIONS}},
        "pmcids": {"items": {"pattern": PMCIDS}},
        "aspect": {"pattern": ASPECT},
        "team": team,
        "q": term_query, "text": term_query, "query": term_query,
        # a route that declares its own maximum keeps it (sessions, traces, hierarchy lists, the label export)
        "limit": {"minimum": 1, "maximum": settings.max_page_size},
    }


#: the GET searches: their parameters are the fields of the POST body (``SearchRequest``), bounded the same way
SEARCH_GETS = frozenset({"GET /v1/papers/search", "GET /v1/passages/search"})
#: operations that page like a search (``limit``, ``offset`` within the search settings' bounds)
PAGED = SEARCH_GETS | {"GET /v1/papers/{pmcid}/similar"}
#: operations that answer an export (``format``, or an ``Accept`` of a file type) as a file instead of JSON
EXPORTS = SEARCH_GETS | {"POST /v1/papers/search", "POST /v1/passages/search"}


def search_parameter_bounds(settings: Settings) -> dict[str, dict[str, Any]]:
    """Bounds of the GET searches' parameters (beside ``parameter_bounds``)."""
    return {
        "query": {"minLength": 1, "maxLength": settings.max_query_chars, "pattern": NON_BLANK},
        "gene": {"minLength": 1, "maxLength": MAX_GENE_REF_CHARS},
        "section": {"items": {"pattern": SECTIONS}}, "pmcid": {"items": {"pattern": FILTER_PMCIDS}},
        "facets": {"items": {"pattern": FACET_LIST}},
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
    team = {} if settings.auth else {"pattern": f"^(?:{TEAM_NAME.pattern.strip('^$')})?$"}
    return {
        "SearchRequest": {
            "query": {"minLength": 1, "maxLength": settings.max_query_chars, "pattern": NON_BLANK},
            "limit": {"minimum": 1, "maximum": settings.max_page_size},
            "offset": {"minimum": 0, "maximum": settings.max_offset},
            "collection": {"pattern": _anchored(names.COLLECTION_PATTERN), "maxLength": 63},
            "max_hits": {"minimum": 1, "maximum": settings.max_export_hits},
        },
        "NamesRequest": {"names": {"minItems": 1, "items": {"minLength": 1, "pattern": NON_BLANK}}},
        "SessionCreate": {"team": team},
        "HiddenTerms": {"ids": {"items": {"pattern": "^[^\\u0000:]*:[^\\u0000]*$"}}},
        "Filters": {"section_types": {"items": {"pattern": f"^{_SECTION_ITEM}$"}}},
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

    for comp, rule in SCHEMA_RULES.items():
        if comp in schemas:
            schemas[comp].update(copy.deepcopy(rule))
    schemas[JSON_VALUE] = json_value_schema()
    texts: set[str] = set()
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            key = f"{method.upper()} {path}"
            public = path in PUBLIC_PATHS
            for p in op.get("parameters", []):
                _bound(p.get("schema"), (sbounds if key in PAGED else pbounds).get(p["name"], {}))
                _text(p.get("schema"), schemas, texts)
                if p["name"] in REQUIRED_PARAMS.get(key, ()):
                    p["required"] = True
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            _text(body.get("schema"), schemas, texts)
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
    if key not in NO_WRITES:
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


#: which bound applies to which JSON type
_BOUND_TYPES = {"minimum": "integer", "maximum": "integer", "minLength": "string", "maxLength": "string",
                "pattern": "string", "minItems": "array", "items": "array"}


def _bound(schema: dict[str, Any] | None, bounds: dict[str, Any]) -> None:
    """Add ``bounds`` to a parameter or property schema (also inside ``anyOf``, for optional values; ``items`` to
    an array's items); bounds the model itself declares win."""
    if not schema or not bounds:
        return
    targets = [s for s in schema.get("anyOf", []) if s.get("type") in ("string", "integer", "array")] or [schema]
    for s in targets:
        for k, v in bounds.items():
            if _BOUND_TYPES.get(k) != s.get("type"):
                continue
            if k == "items":
                _bound(s.get("items"), v)
            else:
                s.setdefault(k, v)


def _text(schema: dict[str, Any] | None, schemas: dict[str, Any], seen: set[str]) -> None:
    """Every string a request may send, in ``schema`` and the components it names, declared without NUL (the input
    guard refuses it); a free-form object's values are ``JsonValue``s."""
    if not isinstance(schema, dict):
        return
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name not in seen and name != JSON_VALUE:
            seen.add(name)
            _text(schemas.get(name), schemas, seen)
        return
    if schema.get("type") == "string" and not ({"enum", "const", "format"} & set(schema)):
        schema.setdefault("pattern", TEXT)
    if schema.get("type") == "object" and schema.get("additionalProperties") is True:
        schema["additionalProperties"] = {"$ref": f"#/components/schemas/{JSON_VALUE}"}
        schema.setdefault("propertyNames", {"pattern": TEXT})
        schema.setdefault("examples", [{}])   # a valid value to start from (generators otherwise start from 0)
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        for sub in schema.get(key, []):
            _text(sub, schemas, seen)
    for key in ("items", "additionalProperties"):
        _text(schema.get(key), schemas, seen)
    for sub in (schema.get("properties") or {}).values():
        _text(sub, schemas, seen)
