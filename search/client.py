"""The Python client of the flysift REST API, sync (:class:`Client`) and async (:class:`AsyncClient`).

Curation harnesses, evaluation, the MCP adapter and the tests all go through here, so they see the service exactly
as agents do. Every endpoint has one method, written once in :class:`_Endpoints` as a request description; the two
clients differ only in how they send it (each method of ``AsyncClient`` returns an awaitable of the same type).

Failures raise :class:`ClientError` subclasses chosen by the API's error ``code`` (then the HTTP status), carrying
``code``, ``message``, ``details`` and ``status``; a service that cannot be reached raises :class:`Unavailable`
with code ``unreachable``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from search.core.models import (
    CollectionInfo,
    IndexStats,
    IndexSummary,
    Paper,
    PaperSearchResults,
    PaperText,
    PassageSearchResults,
)
from search.core.names import DEFAULT_COLLECTION
from search.core.query import Filters
from search.core.supplements import SupplementList, SupplementRead
from search.schema.flyaoc import ValidationReport
from search.schema.hidden import HiddenSpec
from search.schema.sessions import BudgetPolicy, Coverage, Session, Submission, SynonymPolicy, TraceEvent
from search.schema.terms import (
    RecogniseResponse,
    TermLabelPage,
    TermList,
    TermLookup,
    TermResolveResponse,
    TermSearchResponse,
)

DEFAULT_TIMEOUT = 30.0
DENSE_BUILD_TIMEOUT = 1800.0
SESSION_HEADER = "X-Session-Id"
#: terms per page of the label export (the service accepts up to 10,000)
LABEL_PAGE_SIZE = 5000


# ---- errors ---------------------------------------------------------------------------------------------------------


class ClientError(Exception):
    """An error answer of the API (or no answer). ``code`` is the API's stable error code."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None, status: int | None = None):
        super().__init__(f"[{code}] {message}")
        self.code, self.message, self.details, self.status = code, message, details or {}, status


class InvalidRequestError(ClientError):
    """The request was refused as malformed or over a limit; the message says what to change."""


class AuthError(ClientError):
    """Missing, wrong or insufficient API key."""


class NotFoundError(ClientError):
    pass


class ConflictError(ClientError):
    """The resource is not in a state that allows this (e.g. a closed session)."""


class BudgetExhausted(ClientError):
    """The session's reading budget is spent: submit the annotations."""


class RateLimited(ClientError):
    def __init__(self, *args: Any, retry_after: float | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.retry_after = retry_after


class Unavailable(ClientError):
    """The service (or its engine) cannot answer now; retry after ``retry_after`` seconds."""

    def __init__(self, *args: Any, retry_after: float | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.retry_after = retry_after


ERRORS_BY_CODE: dict[str, type[ClientError]] = {
    "invalid_request": InvalidRequestError, "limit_exceeded": InvalidRequestError, "bad_request": InvalidRequestError,
    "query_syntax": InvalidRequestError, "rebuild_needed": ConflictError, "concepts_missing": ConflictError,
    "unauthorized": AuthError, "forbidden": AuthError,
    "not_found": NotFoundError, "term_hidden": NotFoundError, "session_closed": ConflictError,
    "budget_exhausted": BudgetExhausted,
    "rate_limited": RateLimited,
    "unavailable": Unavailable, "index_missing": Unavailable,
}
ERRORS_BY_STATUS: dict[int, type[ClientError]] = {
    400: InvalidRequestError, 401: AuthError, 403: AuthError, 404: NotFoundError, 409: ConflictError,
    422: InvalidRequestError, 429: RateLimited, 503: Unavailable,
}


def error_from_response(resp: httpx.Response) -> ClientError:
    """The typed exception for an error response (the API's ``{"error": {...}}`` or any other body)."""
    try:
        err = resp.json()["error"]
        code, message, details = str(err["code"]), str(err["message"]), dict(err.get("details") or {})
    except (ValueError, KeyError, TypeError):
        code, message, details = f"http_{resp.status_code}", resp.text[:500] or resp.reason_phrase, {}
    cls = ERRORS_BY_CODE.get(code) or ERRORS_BY_STATUS.get(resp.status_code, ClientError)
    if cls in (RateLimited, Unavailable):
        return cls(code, message, details, resp.status_code, retry_after=_retry_after(resp))
    return cls(code, message, details, resp.status_code)


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return float(resp.headers["Retry-After"])
    except (KeyError, ValueError):
        return None


def _transport_error(base_url: str, exc: httpx.TransportError) -> Unavailable:
    code = "timeout" if isinstance(exc, httpx.TimeoutException) else "unreachable"
    return Unavailable(code, f"Cannot reach the flysift API at {base_url} ({type(exc).__name__}: {exc}); start "
                             "the service (`flysift serve --data-dir DATA --port PORT`) or point --url / FLYSIFT_URL "
                             "at a running one, then retry.", status=None)


_T = TypeVar("_T")


def awaited(call: _T) -> Awaitable[_T]:
    """``await awaited(async_client.get_paper(…))``: the endpoint methods are shared by both clients and annotated
    with their results, which ``AsyncClient`` returns through an awaitable; this says so to the type checker."""
    return cast(Awaitable[_T], call)


# ---- requests -------------------------------------------------------------------------------------------------------

@dataclass
class _Request:
    """One API call: what to send and how to read the answer."""

    method: str
    path: str
    parse: Callable[[Any], Any] = lambda body: body
    params: dict[str, Any] | None = None
    json: Any = None
    timeout: float | None = None  # None: the client's default
    text: bool = False  # the answer is text (CSV), not JSON


def _model(cls: type[BaseModel]) -> Callable[[Any], Any]:
    return cls.model_validate


def _dump(value: Any) -> Any:
    """Pydantic models (and lists of them) as JSON-ready data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    return value


def _part(name: str) -> str:
    """A paper key or file name as one path segment: a DOI key's ``/`` (and any ``?``, ``#`` or ``%``) escaped, so
    ``DOI:10.1002/(SICI)...`` reaches the route whole."""
    return quote(name, safe=":")


def _params(**kw: Any) -> dict[str, Any]:
    """Query parameters without the unset ones; lists become comma-separated."""
    out: dict[str, Any] = {}
    for key, value in kw.items():
        if value is None:
            continue
        if isinstance(value, list | tuple | set | frozenset):
            value = ",".join(value)
        elif isinstance(value, bool):
            value = str(value).lower()
        out[key] = value
    return out


class _Endpoints:
    """Every endpoint, once. ``_send`` (sync or async) performs the request."""

    base_url: str
    session_id: str | None

    def _send(self, req: _Request) -> Any:  # pragma: no cover - implemented by the clients
        raise NotImplementedError

    def _sid(self, session_id: str | None) -> str:
        sid = session_id or self.session_id
        if not sid:
            raise ValueError("No session: pass session_id, or create one with create_session() and set "
                             "client.session_id.")
        return sid

    # ---- service ----------------------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self._send(_Request("GET", "/v1/health"))

    def stats(self, collection: str = DEFAULT_COLLECTION) -> IndexStats:
        return self._send(_Request("GET", "/v1/stats", _model(IndexStats), params={"collection": collection}))

    # ---- papers and passages ----------------------------------------------------------------------------------
    @staticmethod
    def _search_body(query: str, limit: int | None, offset: int, filters: Filters | dict | None,
                     snippets: bool | None, collection: str, gene: str | None, mode: str | None = None,
                     **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query, "offset": offset, "collection": collection}
        if limit is not None:
            body["limit"] = limit
        if mode is not None:
            body["mode"] = mode
        if filters is not None:
            body["filters"] = _dump(filters)
        if snippets is not None:
            body["snippets"] = snippets
        if gene is not None:
            body["gene"] = gene
        body.update({k: _dump(v) for k, v in extra.items() if v is not None})
        return body

    def search_papers(self, query: str, limit: int = 10, offset: int = 0, filters: Filters | dict | None = None,
                      snippets: bool | None = None, collection: str = DEFAULT_COLLECTION, gene: str | None = None,
                      mode: Literal["bm25", "dense", "hybrid"] | None = None,
                      syntax: Literal["query", "plain"] | None = None, highlight: bool | dict | None = None,
                      facets: Iterable[str] | None = None, explain: bool | None = None) -> PaperSearchResults:
        """Papers, best first (BM25 by default; gene symbols are case-sensitive; ``mode`` dense or hybrid needs the
        collection's dense index). Searching never spends budget. ``syntax``: ``query`` (the query language; the
        service's default outside a session) or ``plain``; ``highlight``: ``True`` or its settings (``pre_tag``,
        ``post_tag``, ``fragment_size``, ``number_of_fragments``, ``encoder``); ``facets``: ``year``, ``section``."""
        return self._send(_Request("POST", "/v1/papers/search", _model(PaperSearchResults),
                                   json=self._search_body(query, limit, offset, filters, snippets, collection, gene,
                                                          mode, syntax=syntax, highlight=highlight,
                                                          facets=list(facets) if facets else None,
                                                          explain=explain)))

    def search_passages(self, query: str, limit: int = 10, offset: int = 0, filters: Filters | dict | None = None,
                        snippets: bool | None = None, collection: str = DEFAULT_COLLECTION, gene: str | None = None,
                        mode: Literal["bm25", "dense", "hybrid"] | None = None,
                        syntax: Literal["query", "plain"] | None = None, highlight: bool | dict | None = None,
                        facets: Iterable[str] | None = None, titles: bool | None = None,
                        explain: bool | None = None) -> PassageSearchResults:
        """Evidence passages (paragraphs with stable ids and character offsets), best first (``titles``: with their
        papers' titles; the other options as ``search_papers``)."""
        return self._send(_Request("POST", "/v1/passages/search", _model(PassageSearchResults),
                                   json=self._search_body(query, limit, offset, filters, snippets, collection, gene,
                                                          mode, syntax=syntax, highlight=highlight,
                                                          facets=list(facets) if facets else None, titles=titles,
                                                          explain=explain)))

    def similar_papers(self, pmcid: str, limit: int = 10, offset: int = 0, collection: str = DEFAULT_COLLECTION,
                       snippets: bool = False, highlight: bool = False) -> PaperSearchResults:
        """Papers like ``pmcid`` (more-like-this); ``query.terms`` holds the words it was found by."""
        return self._send(_Request("GET", f"/v1/papers/{_part(pmcid)}/similar", _model(PaperSearchResults),
                                   params=_params(limit=limit, offset=offset, collection=collection,
                                                  snippets=snippets, highlight=highlight)))

    def collections(self) -> list[CollectionInfo]:
        """The collections with a published build (papers, passages, build, engine, ontologies)."""
        return self._send(_Request("GET", "/v1/collections",
                                   lambda body: [CollectionInfo.model_validate(c) for c in body["collections"]]))

    @staticmethod
    def _export_request(kind: Literal["papers", "passages"], query: str, format: str, max_hits: int | None,
                        filters: Filters | dict | None, collection: str, gene: str | None,
                        syntax: Literal["query", "plain"] | None, trec_qid: str | None,
                        run_tag: str | None) -> tuple[str, dict[str, Any]]:
        body = _Endpoints._search_body(query, None, 0, filters, None, collection, gene, None, syntax=syntax,
                                       format=format, max_hits=max_hits, trec_qid=trec_qid, run_tag=run_tag)
        return f"/v1/{kind}/search", body

    def get_paper(self, pmcid: str, sections: Iterable[str] | None = None, max_chars: int | None = None,
                  cursor: str | None = None, collection: str = DEFAULT_COLLECTION) -> PaperText:
        """One page of a paper's text; ``next_cursor`` continues it. In a session, reading spends budget."""
        return self._send(_Request("GET", f"/v1/papers/{_part(pmcid)}", _model(PaperText),
                                   params=_params(sections=list(sections) if sections is not None else None,
                                                  max_chars=max_chars, cursor=cursor, collection=collection)))

    # ---- supplementary files ----------------------------------------------------------------------------------
    def list_supplements(self, pmcid: str, collection: str = DEFAULT_COLLECTION) -> SupplementList:
        """A paper's supplementary files with their sheets or pages and extraction status (free in a session)."""
        return self._send(_Request("GET", f"/v1/papers/{_part(pmcid)}/supplements", _model(SupplementList),
                                   params={"collection": collection}))

    def read_supplement(self, pmcid: str, file: int | str, part: int | str | None = None, start: int | None = None,
                        limit: int | None = None, max_chars: int | None = None,
                        collection: str = DEFAULT_COLLECTION) -> SupplementRead:
        """A page of one sheet, table, text or PDF of a file (by number or name): rows with the table's header, so
        tables can be joined; ``next_start`` continues. In a session this reads the paper (budget)."""
        return self._send(_Request("GET", f"/v1/papers/{_part(pmcid)}/supplements/{_part(str(file))}",
                                   _model(SupplementRead),
                                   params=_params(part=None if part is None else str(part), start=start, limit=limit,
                                                  max_chars=max_chars, collection=collection)))

    def read_supplement_csv(self, pmcid: str, file: int | str, part: int | str | None = None,
                            start: int | None = None, limit: int | None = None,
                            collection: str = DEFAULT_COLLECTION) -> str:
        """The same page as CSV text (header first; cells that would run as formulas neutralised)."""
        return self._send(_Request("GET", f"/v1/papers/{_part(pmcid)}/supplements/{_part(str(file))}",
                                   params=_params(part=None if part is None else str(part), start=start, limit=limit,
                                                  format="csv", collection=collection), text=True))

    # ---- collection builds ------------------------------------------------------------------------------------
    def create_build(self, collection: str) -> dict[str, Any]:
        """Open a new build of ``collection``: ``{collection, build_id}``."""
        return self._send(_Request("POST", f"/v1/collections/{collection}/builds"))

    def add_papers(self, collection: str, build_id: str, papers: Iterable[Paper | dict]) -> dict[str, Any]:
        """Index papers into an open build: ``{indexed, passages}``."""
        return self._send(_Request("POST", f"/v1/collections/{collection}/builds/{build_id}/papers",
                                   json={"papers": _dump(list(papers))}))

    def publish_build(self, collection: str, build_id: str, allow_shrink: bool = False) -> IndexSummary:
        """Make the build the one searches of ``collection`` see. An empty build, or one holding less than the
        service's ``min_publish_share`` of the live build's papers (unless ``allow_shrink``), is refused with
        ``ConflictError`` (code ``build_refused``) and stays open."""
        return self._send(_Request("POST", f"/v1/collections/{collection}/builds/{build_id}/publish",
                                   _model(IndexSummary), params=_params(allow_shrink=allow_shrink or None)))

    def abort_build(self, collection: str, build_id: str) -> dict[str, Any]:
        """Abort an open build: its files are removed, the collection unlocks and the live build keeps serving."""
        return self._send(_Request("DELETE", f"/v1/collections/{collection}/builds/{build_id}"))

    def build_dense(self, collection: str, batch_size: int | None = None,
                    timeout: float = DENSE_BUILD_TIMEOUT) -> dict[str, Any]:
        """Embed the published passages of a (small) collection into its dense index; returns its meta. Runs
        synchronously on the server, hence the long ``timeout``."""
        return self._send(_Request("POST", f"/v1/collections/{collection}/dense",
                                   params=_params(batch_size=batch_size), timeout=timeout))

    # ---- sessions ---------------------------------------------------------------------------------------------
    def create_session(self, gene: str, team: str | None = None, max_papers: int | None = None,
                       hidden_terms: HiddenSpec | dict[str, Any] | None = None,
                       synonym_policy: SynonymPolicy | None = None, budget_policy: BudgetPolicy | None = None,
                       label: str | None = None) -> Session:
        """Start an agent run for ``gene`` (FlyBase id or symbol). Unset options take the service defaults."""
        body = {k: _dump(v) for k, v in dict(gene=gene, team=team, max_papers=max_papers, hidden_terms=hidden_terms,
                                             synonym_policy=synonym_policy, budget_policy=budget_policy,
                                             label=label).items() if v is not None}
        return self._send(_Request("POST", "/v1/sessions", _model(Session), json=body))

    def get_session(self, session_id: str | None = None) -> Session:
        return self._send(_Request("GET", f"/v1/sessions/{self._sid(session_id)}", _model(Session)))

    def list_sessions(self, team: str | None = None, limit: int | None = None,
                      offset: int | None = None) -> list[Session]:
        """The caller's team's sessions, newest first."""
        return self._send(_Request("GET", "/v1/sessions", lambda b: [Session.model_validate(s) for s in b["sessions"]],
                                   params=_params(team=team, limit=limit, offset=offset)))

    def close_session(self, session_id: str | None = None) -> Session:
        return self._send(_Request("POST", f"/v1/sessions/{self._sid(session_id)}/close", _model(Session)))

    def register_names(self, names: Iterable[str], session_id: str | None = None) -> list[str]:
        """Add gene names the agent found (search expands with them under the ``registered`` policy); returns
        all names registered so far."""
        return self._send(_Request("POST", f"/v1/sessions/{self._sid(session_id)}/names",
                                   lambda b: b["registered_names"], json={"names": list(names)}))

    def get_trace(self, session_id: str | None = None, after: int | None = None,
                  limit: int | None = None) -> list[TraceEvent]:
        """The session's calls in order (``after``: only events with a larger sequence number)."""
        return self._send(_Request("GET", f"/v1/sessions/{self._sid(session_id)}/trace",
                                   lambda b: [TraceEvent.model_validate(e) for e in b["events"]],
                                   params=_params(after=after, limit=limit)))

    def get_coverage(self, pmcids: Iterable[str] | None = None, session_id: str | None = None) -> Coverage:
        """What the session read of ``pmcids`` (default: the gene's curator-cited papers, if the service has them)."""
        return self._send(_Request("GET", f"/v1/sessions/{self._sid(session_id)}/coverage", _model(Coverage),
                                   params=_params(pmcids=list(pmcids) if pmcids is not None else None)))

    def submit(self, annotations: dict[str, Any], session_id: str | None = None) -> ValidationReport:
        """Submit a FlyAOC prediction object; the report says whether it is valid and why not."""
        return self._send(_Request("POST", f"/v1/sessions/{self._sid(session_id)}/submission",
                                   _model(ValidationReport), json=annotations))

    def get_submissions(self, session_id: str | None = None) -> list[Submission]:
        """Every submission in order; the run's output is the last valid one."""
        return self._send(_Request("GET", f"/v1/sessions/{self._sid(session_id)}/submission",
                                   lambda b: [Submission.model_validate(x) for x in b["submissions"]]))

    # ---- ontology terms ---------------------------------------------------------------------------------------
    def search_terms(self, query: str | None = None, ontology: str = "go", aspect: str | None = None,
                     limit: int = 10, include_obsolete: bool | None = None, hidden: str | Iterable[str] | None = None,
                     hidden_descendants: bool | None = None, *, q: str | None = None,
                     mode: Literal["bm25", "dense", "hybrid"] | None = None,
                     mf_activity_only: bool | None = None) -> TermSearchResponse:
        """Terms by name, synonym, definition or id. ``q`` is the
        deprecated name of ``query`` (one release; a DeprecationWarning). ``mode`` dense or hybrid needs the
        data dir's term encoder or the ontology's dense term index (409 ``dense_unavailable`` otherwise); by default
        the service uses hybrid where a term encoder fits. ``mf_activity_only``: GO molecular functions only for an
        activity-shaped query."""
        if q is not None:
            warnings.warn("search_terms(q=...) is deprecated: use query=", DeprecationWarning, stacklevel=2)
            if query is not None:
                raise TypeError("search_terms: give query, not also q (its deprecated alias)")
            query = q
        if query is None:
            raise TypeError("search_terms: query is required")
        return self._send(_Request("GET", "/v1/terms/search",
                                   _model(TermSearchResponse),
                                   params=_params(query=query, ontology=ontology, aspect=aspect, limit=limit,
                                                  include_obsolete=include_obsolete, hidden=_hidden(hidden),
                                                  hidden_descendants=hidden_descendants, mode=mode,
                                                  mf_activity_only=mf_activity_only)))

    def get_term(self, term_id: str, hidden: str | Iterable[str] | None = None,
                 hidden_descendants: bool | None = None) -> TermLookup:
        """A term by primary or alternative id; an alternative id resolves with a note."""
        return self._send(_Request("GET", f"/v1/terms/{term_id}",
                                   _model(TermLookup),
                                   params=_params(hidden=_hidden(hidden), hidden_descendants=hidden_descendants)))

    def related_terms(self, term_id: str, direction: Literal["ancestors", "descendants", "parents", "children"],
                      relations: str | None = None, limit: int | None = None,
                      hidden: str | Iterable[str] | None = None, hidden_descendants: bool | None = None
                      ) -> TermList:
        """Ancestors, descendants, parents or children of a term."""
        return self._send(_Request("GET", f"/v1/terms/{term_id}/{direction}",
                                   _model(TermList),
                                   params=_params(relations=relations, limit=limit, hidden=_hidden(hidden),
                                                  hidden_descendants=hidden_descendants)))

    def resolve_terms(self, text: str, ontology: str = "go", aspect: str | None = None, limit: int = 5,
                      hidden: str | Iterable[str] | None = None, hidden_descendants: bool | None = None
                      ) -> TermResolveResponse:
        """Terms ranked for a free-text description (the list is ``results``)."""
        return self._send(_Request("GET", "/v1/terms/resolve",
                                   _model(TermResolveResponse),
                                   params=_params(text=text, ontology=ontology, aspect=aspect, limit=limit,
                                                  hidden=_hidden(hidden), hidden_descendants=hidden_descendants)))

    def term_labels(self, ontology: str = "go", limit: int | None = None, cursor: str | None = None,
                    hidden: str | Iterable[str] | None = None, hidden_descendants: bool | None = None
                    ) -> TermLabelPage:
        """One page of every live term's labels; follow ``next_cursor``, or use ``iter_term_labels``."""
        return self._send(_Request("GET", f"/v1/terms/{ontology}/labels",
                                   _model(TermLabelPage),
                                   params=_params(limit=limit, cursor=cursor, hidden=_hidden(hidden),
                                                  hidden_descendants=hidden_descendants)))

    def recognise_terms(self, texts: Iterable[str], ontologies: Iterable[str] | None = None,
                        task: Literal["go", "expression"] | None = None,
                        molecular_function: Literal["activity", "all"] | None = None,
                        hidden: str | Iterable[str] | None = None, hidden_descendants: bool | None = None
                        ) -> RecogniseResponse:
        """Ontology terms in the texts of one document (per text, its mentions with term id, ontology, span, matched
        text, what matched and the sentence). ``task`` (``go`` or
        ``expression``) or the order of ``ontologies`` decides between same-named terms."""
        body: dict[str, Any] = {"texts": list(texts)}
        if ontologies is not None:
            body["ontologies"] = list(ontologies)
        if task is not None:
            body["task"] = task
        if molecular_function is not None:
            body["molecular_function"] = molecular_function
        return self._send(_Request("POST", "/v1/terms/recognise",
                                   _model(RecogniseResponse), json=body,
                                   params=_params(hidden=_hidden(hidden), hidden_descendants=hidden_descendants)))

    def flyaoc_search_terms(self, ontology: Literal["go", "fbbt", "fbdv"], query: str, aspect: str | None = None,
                            limit: int = 10, hidden: str | Iterable[str] | None = None,
                            hidden_descendants: bool | None = None) -> list[dict[str, Any]]:
        """FlyAOC's ``search_go_terms`` / ``search_anatomy_terms`` / ``search_stage_terms`` records (§2.3)."""
        tool = {"go": "search_go_terms", "fbbt": "search_anatomy_terms", "fbdv": "search_stage_terms"}[ontology]
        extra = _params(aspect=aspect, hidden=_hidden(hidden), hidden_descendants=hidden_descendants) \
            if ontology == "go" else {}
        return self._send(_Request("GET", f"/v1/flyaoc/{tool}", params={"query": query, "limit": limit, **extra}))

    def flyaoc_term_children(self, term_id: str, limit: int = 20, relations: str | None = None,
                             hidden: str | Iterable[str] | None = None,
                             hidden_descendants: bool | None = None) -> dict[str, Any]:
        """FlyAOC's ``get_term_children`` record (§2.4)."""
        return self._send(_Request("GET", "/v1/flyaoc/get_term_children",
                                   params=_params(term_id=term_id, limit=limit, relations=relations,
                                                  hidden=_hidden(hidden), hidden_descendants=hidden_descendants)))


def _hidden(hidden: str | Iterable[str] | None) -> str | None:
    if hidden is None or isinstance(hidden, str):
        return hidden
    return ",".join(hidden) or None


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _result(req: _Request, resp: httpx.Response) -> Any:
    if resp.status_code >= 400:
        raise error_from_response(resp)
    if not resp.content:
        return req.parse(None)
    if req.text:
        return req.parse(resp.text)
    try:
        body = resp.json()
    except json.JSONDecodeError:
        raise ClientError("bad_response", f"The API answered {req.method} {req.path} with non-JSON content",
                          status=resp.status_code) from None
    return req.parse(body)


def _follow(fetch: Callable[[str | None], Any]) -> Iterator[Any]:
    """Pages from ``fetch(cursor)``, starting with no cursor and following ``next_cursor`` until a page has none."""
    cursor = None
    while True:
        page = fetch(cursor)
        yield page
        if not page.next_cursor:
            return
        cursor = page.next_cursor


class Client(_Endpoints):
    """Synchronous client. ``session_id`` (settable) is sent as ``X-Session-Id`` so reads count against it."""

    def __init__(self, base_url: str, api_key: str | None = None, session_id: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, transport: httpx.BaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self.session_id = session_id
        self._http = httpx.Client(base_url=self.base_url, headers=_headers(api_key), timeout=timeout,
                                  transport=transport)

    def _send(self, req: _Request) -> Any:
        headers = {SESSION_HEADER: self.session_id} if self.session_id else {}
        try:
            timeout = req.timeout if req.timeout is not None else httpx.USE_CLIENT_DEFAULT
            resp = self._http.request(req.method, req.path, params=req.params, json=req.json, headers=headers,
                                      timeout=timeout)
        except httpx.TransportError as exc:
            raise _transport_error(self.base_url, exc) from exc
        return _result(req, resp)

    def iter_paper_pages(self, pmcid: str, sections: Iterable[str] | None = None, max_chars: int | None = None,
                         collection: str = DEFAULT_COLLECTION) -> Iterator[PaperText]:
        """Every page of a paper, following ``next_cursor``."""
        sections = list(sections) if sections is not None else None
        return _follow(lambda cursor: self.get_paper(pmcid, sections, max_chars, cursor, collection))

    def iter_export(self, kind: Literal["papers", "passages"], query: str, format: str, *,
                    max_hits: int | None = None, filters: Filters | dict | None = None,
                    collection: str = DEFAULT_COLLECTION, gene: str | None = None,
                    syntax: Literal["query", "plain"] | None = None,
                    trec_qid: str | None = None, run_tag: str | None = None) -> Iterator[bytes]:
        """A search's hits as a file (``csv``, ``tsv``, ``ris``, ``bibtex``, ``jsonl``, ``trec``), in chunks as the
        service streams them; errors before the first byte raise as any call does."""
        path, body = self._export_request(kind, query, format, max_hits, filters, collection, gene, syntax,
                                          trec_qid, run_tag)
        headers = {SESSION_HEADER: self.session_id} if self.session_id else {}
        try:
            with self._http.stream("POST", path, json=body, headers=headers) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise error_from_response(resp)
                yield from resp.iter_bytes()
        except httpx.TransportError as exc:
            raise _transport_error(self.base_url, exc) from exc

    def iter_term_labels(self, ontology: str = "go", page_size: int = LABEL_PAGE_SIZE,
                         hidden: str | Iterable[str] | None = None, hidden_descendants: bool | None = None
                         ) -> Iterator[TermLabelPage]:
        """Every page of the term label export, following ``next_cursor`` (all pages share one ``version``; a
        re-index in between is an ``InvalidRequestError`` with code ``cursor_stale``: start again)."""
        return _follow(lambda cursor: self.term_labels(ontology, page_size, cursor, hidden, hidden_descendants))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncClient(_Endpoints):
    """Asynchronous client with the same methods as :class:`Client`; each returns an awaitable."""

    def __init__(self, base_url: str, api_key: str | None = None, session_id: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, transport: httpx.AsyncBaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self.session_id = session_id
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=_headers(api_key), timeout=timeout,
                                       transport=transport)

    async def _send(self, req: _Request) -> Any:
        headers = {SESSION_HEADER: self.session_id} if self.session_id else {}
        try:
            timeout = req.timeout if req.timeout is not None else httpx.USE_CLIENT_DEFAULT
            resp = await self._http.request(req.method, req.path, params=req.params, json=req.json, headers=headers,
                                            timeout=timeout)
        except httpx.TransportError as exc:
            raise _transport_error(self.base_url, exc) from exc
        return _result(req, resp)

    async def iter_paper_pages(self, pmcid: str, sections: Iterable[str] | None = None, max_chars: int | None = None,
                               collection: str = DEFAULT_COLLECTION) -> AsyncIterator[PaperText]:
        """Every page of a paper, following ``next_cursor``."""
        sections = list(sections) if sections is not None else None
        cursor = None
        while True:
            page = await awaited(self.get_paper(pmcid, sections, max_chars, cursor, collection))
            yield page
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def iter_export(self, kind: Literal["papers", "passages"], query: str, format: str, *,
                          max_hits: int | None = None, filters: Filters | dict | None = None,
                          collection: str = DEFAULT_COLLECTION, gene: str | None = None,
                          syntax: Literal["query", "plain"] | None = None, trec_qid: str | None = None,
                          run_tag: str | None = None) -> AsyncIterator[bytes]:
        """As ``Client.iter_export``."""
        path, body = self._export_request(kind, query, format, max_hits, filters, collection, gene, syntax,
                                          trec_qid, run_tag)
        headers = {SESSION_HEADER: self.session_id} if self.session_id else {}
        try:
            async with self._http.stream("POST", path, json=body, headers=headers) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise error_from_response(resp)
                async for chunk in resp.aiter_bytes():
                    yield chunk
        except httpx.TransportError as exc:
            raise _transport_error(self.base_url, exc) from exc

    async def iter_term_labels(self, ontology: str = "go", page_size: int = LABEL_PAGE_SIZE,
                               hidden: str | Iterable[str] | None = None, hidden_descendants: bool | None = None
                               ) -> AsyncIterator[TermLabelPage]:
        """Every page of the term label export, following ``next_cursor``."""
        cursor = None
        while True:
            page = await awaited(self.term_labels(ontology, page_size, cursor, hidden, hidden_descendants))
            yield page
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
