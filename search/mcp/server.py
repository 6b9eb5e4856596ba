"""The MCP server: FlyAOC's tools (spec §2) over the REST API, bound to one session.

A thin adapter: every tool is one or two calls of :class:`search.client.AsyncClient` with the session's
``X-Session-Id``, so budgets, hidden terms, synonym policy and traces are the service's, not this process's. Tools
answer JSON text with 2-space indentation like FlyAOC's servers, and never raise: a failure comes back as
``{"error": "<what happened and what to do>", "code": ...}`` (the budget refusal reads "Paper limit reached (16/16).
Submit your annotations.").

Tool results stay under what agent clients accept (Claude Code caps a result at 25,000 tokens): searches cap their
``limit``, paper text comes in pages of at most ``max_chars`` characters with a ``next_cursor``, and any result is
trimmed to :data:`MAX_RESULT_CHARS`.

Run it with ``flysift mcp --api URL (--session ID | --gene G [--team T --max-papers N])`` over stdio (default) or
streamable HTTP (``--transport http --port 8765``, endpoint ``/mcp``); the command is ``search.cli.mcp``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from search.client import AsyncClient, ClientError, awaited
from search.core.models import ABSTRACT, SECTION_TYPES, PaperText
from search.core.supplements import SupplementPlace
from search.schema.hidden import hidden_query
from search.schema.sessions import Session

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

log = logging.getLogger("flysift.mcp")

#: ~15k tokens of JSON text: well under Claude Code's 25,000-token cap on one tool result
MAX_RESULT_CHARS = 60_000
DEFAULT_PAPER_CHARS = 40_000
MAX_PAPER_CHARS = 50_000
MIN_PAPER_CHARS = 1_000
MAX_SEARCH_LIMIT = 50
MAX_PASSAGE_LIMIT = 30
MAX_TERM_LIMIT = 50
MAX_FIND_TERMS_CHARS = 20_000
MAX_SUPPLEMENT_ROWS = 200
ABSTRACT_CHARS = 500
SECTION_NAMES = (ABSTRACT, *SECTION_TYPES)


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def fit(items: list[Any]) -> str:
    """JSON of a result list, dropping items from the end until it fits :data:`MAX_RESULT_CHARS`."""
    n = len(items)
    text = dumps(items)
    while len(text) > MAX_RESULT_CHARS and n > 1:
        n = max(1, min(n - 1, n * MAX_RESULT_CHARS // len(text)))
        text = dumps(items[:n])
    return text


def error(message: str, code: str) -> str:
    return dumps({"error": message, "code": code})


def _bounded(name: str, value: int, low: int, high: int) -> str | None:
    if not low <= value <= high:
        return f"{name} must be between {low} and {high} (got {value})."
    return None


def paper_record(page: PaperText, ignored: list[str]) -> dict[str, Any]:
    """FlyAOC's ``{pmcid, title, abstract, sections}`` (sections: type → paragraphs, document order) plus paging."""
    sections: dict[str, list[str]] = {}
    for sec in page.sections:
        sections.setdefault(sec.type, []).extend(sec.paragraphs)
    rec: dict[str, Any] = {"pmcid": page.pmcid, "title": page.title, "abstract": page.abstract, "sections": sections,
                           "total_chars": page.total_chars}
    if page.next_cursor:
        rec["next_cursor"] = page.next_cursor
        rec["note"] = ("More text follows: call get_paper_text again with the same pmcid and sections and "
                       "cursor=next_cursor to continue this paper.")
    if ignored:
        rec["ignored_sections"] = ignored
    return rec


class SessionTools:
    """The tools of one session; each method is one MCP tool and returns JSON text."""

    def __init__(self, api: AsyncClient, session: Session, query_syntax: bool = False):
        self.api = api
        self.session = session
        #: the searches read the query language (opt-in: ``flysift mcp --query-syntax``; FlyAOC's tools read words
        #: and phrases, and parity runs never turn it on)
        self.syntax: Literal["query", "plain"] = "query" if query_syntax else "plain"
        #: the session's hidden terms as the term endpoints' parameters
        self.hidden = hidden_query(spec=session.hidden_terms).params()

    async def _call(self, work: Callable[[], Awaitable[str]]) -> str:
        try:
            return await work()
        except ClientError as exc:
            return error(exc.message, exc.code)
        except Exception as exc:  # a tool must answer, never crash the agent's run
            log.exception("tool failed")
            return error(f"The flysift MCP adapter failed ({type(exc).__name__}: {exc}); retry, or continue "
                         "with other tools.", "adapter_error")

    async def search_corpus(
        self,
        query: Annotated[str, Field(description="Words, gene symbols (case-sensitive: Dl is not dl) or \"phrases\"")],
        limit: Annotated[int, Field(description=f"Number of papers, 1-{MAX_SEARCH_LIMIT}")] = 20,
        gene: Annotated[str | None, Field(description="Optional gene symbol or FlyBase id: also match its names "
                                                      "(symbol, full name and any names you registered)")] = None,
    ) -> str:
        """Search the literature corpus (BM25 over titles, abstracts and full text). Returns papers, best first, as
        {pmcid, title, abstract (first 500 characters), relevance_score, gene_in_title, year}. Searching is free;
        only reading paper text spends the reading budget."""
        if msg := _bounded("limit", limit, 1, MAX_SEARCH_LIMIT):
            return error(msg, "invalid_request")

        async def work() -> str:
            res = await awaited(self.api.search_papers(query, limit=limit, gene=gene, syntax=self.syntax))
            hits = [{"pmcid": h.pmcid, "title": h.title, "abstract": h.abstract[:ABSTRACT_CHARS],
                     "relevance_score": round(h.score, 2), "gene_in_title": h.gene_in_title, "year": h.year}
                    for h in res.hits if h.score > 0]
            return fit(hits)

        return await self._call(work)

    async def search_passages(
        self,
        query: Annotated[str, Field(description="Words, gene symbols or \"phrases\"")],
        limit: Annotated[int, Field(description=f"Number of passages, 1-{MAX_PASSAGE_LIMIT}")] = 10,
        pmcids: Annotated[list[str] | None, Field(description="Only passages of these papers")] = None,
        sections: Annotated[list[str] | None, Field(description="Only these section types, e.g. [\"RESULTS\"]")] = None,
        gene: Annotated[str | None, Field(description="Optional gene whose names also match")] = None,
    ) -> str:
        """Search evidence passages (paragraphs) across the corpus. Returns {passage_id, pmcid, section_type, text,
        start, end, score}: quote text as evidence; start/end are offsets in the paragraph. Searching is free."""
        if msg := _bounded("limit", limit, 1, MAX_PASSAGE_LIMIT):
            return error(msg, "invalid_request")

        async def work() -> str:
            filters = {k: v for k, v in {"pmcids": pmcids, "section_types": sections}.items() if v}
            res = await awaited(self.api.search_passages(query, limit=limit, filters=filters or None, snippets=False,
                                                         gene=gene, syntax=self.syntax))
            return fit([{"passage_id": h.passage_id, "pmcid": h.pmcid, "section_type": h.section_type,
                         "text": h.text, "start": h.start, "end": h.end, "score": round(h.score, 2),
                         **({"supplement": where(h.supplement)} if h.supplement else {})}
                        for h in res.hits])

        return await self._call(work)

    async def get_paper_text(
        self,
        pmcid: Annotated[str, Field(description="The paper, e.g. PMC1440717")],
        sections: Annotated[list[str] | str | None, Field(
            description="Section types to return (INTRO, METHODS, RESULTS, DISCUSS, CONCL, FIG, TABLE …; "
                        "'abstract' for the abstract); default: all")] = None,
        max_chars: Annotated[int, Field(description=f"Characters per page, {MIN_PAPER_CHARS}-{MAX_PAPER_CHARS}")]
        = DEFAULT_PAPER_CHARS,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page, to continue")] = None,
    ) -> str:
        """Read a paper's full text: {pmcid, title, abstract, sections: {type: [paragraphs]}}. Reading spends the
        session's paper budget (see get_budget); long papers come in pages with next_cursor, and continuing a
        paper with its cursor is free. When the budget is spent the answer is an error: submit your annotations."""
        if msg := _bounded("max_chars", max_chars, MIN_PAPER_CHARS, MAX_PAPER_CHARS):
            return error(msg, "invalid_request")
        wanted, ignored = None, []
        if sections:
            names = [s.strip() for s in (sections.split(",") if isinstance(sections, str) else sections)]
            wanted = [n.upper() for n in names if n.upper() in SECTION_NAMES]
            ignored = [n for n in names if n and n.upper() not in SECTION_NAMES]
            if not wanted:
                return error(f"None of the sections {names} exists; use some of {list(SECTION_NAMES)} "
                             "(or omit sections for the whole paper).", "invalid_request")

        async def work() -> str:
            page = await awaited(self.api.get_paper(pmcid.strip(), sections=wanted, max_chars=max_chars,
                                                    cursor=cursor))
            return dumps(paper_record(page, ignored))

        return await self._call(work)

    async def _terms(self, ontology: Literal["go", "fbbt", "fbdv"], query: str, limit: int,
                     aspect: str | None = None) -> str:
        if msg := _bounded("limit", limit, 1, MAX_TERM_LIMIT):
            return error(msg, "invalid_request")

        async def work() -> str:
            hidden = self.hidden if ontology == "go" else {}
            return fit(await awaited(self.api.flyaoc_search_terms(ontology, query, aspect=aspect, limit=limit,
                                                                  **hidden)))

        return await self._call(work)

    async def search_go_terms(
        self,
        query: Annotated[str, Field(description="Words of a GO term name, synonym or definition, or a GO id")],
        aspect: Annotated[str | None, Field(description="P (biological process), F (molecular function) or "
                                                        "C (cellular component)")] = None,
        limit: Annotated[int, Field(description=f"Number of terms, 1-{MAX_TERM_LIMIT}")] = 10,
    ) -> str:
        """Search Gene Ontology terms: {go_id, name, namespace, definition, synonyms?, parents?, children_count?}.
        If no term fits, describe the concept with 'description' instead of 'go_id' when submitting."""
        return await self._terms("go", query, limit, aspect)

    async def search_anatomy_terms(
        self,
        query: Annotated[str, Field(description="Words of an anatomy term (FBbt), or an FBbt id")],
        limit: Annotated[int, Field(description=f"Number of terms, 1-{MAX_TERM_LIMIT}")] = 10,
    ) -> str:
        """Search Drosophila anatomy terms (FBbt): {fbbt_id, name, definition, synonyms?, parents?,
        children_count?}."""
        return await self._terms("fbbt", query, limit)

    async def search_stage_terms(
        self,
        query: Annotated[str, Field(description="Words of a developmental stage (FBdv), or an FBdv id")],
        limit: Annotated[int, Field(description=f"Number of terms, 1-{MAX_TERM_LIMIT}")] = 10,
    ) -> str:
        """Search Drosophila developmental stage terms (FBdv): {fbdv_id, name, definition, synonyms?, parents?,
        children_count?}."""
        return await self._terms("fbdv", query, limit)

    async def get_term_children(
        self,
        term_id: Annotated[str, Field(description="A GO:, FBbt: or FBdv: id")],
        limit: Annotated[int, Field(description=f"Number of children, 1-{MAX_TERM_LIMIT}")] = 20,
    ) -> str:
        """Direct is_a children of a term, to find a more specific one: {term_id, term_name, children_count,
        children, truncated}."""
        if msg := _bounded("limit", limit, 1, MAX_TERM_LIMIT):
            return error(msg, "invalid_request")

        async def work() -> str:
            hidden = self.hidden if term_id.strip().startswith("GO:") else {}
            try:
                return dumps(await awaited(self.api.flyaoc_term_children(term_id, limit=limit, **hidden)))
            except ClientError as exc:  # FlyAOC's own body ({term_id, error}) when the service gives it
                if isinstance(exc.details.get("flyaoc"), dict):
                    return dumps(exc.details["flyaoc"])
                raise

        return await self._call(work)

    async def find_terms(
        self,
        text: Annotated[str, Field(description=f"A passage or quote, at most {MAX_FIND_TERMS_CHARS} characters")],
        task: Annotated[Literal["go", "expression"], Field(description="go: GO terms; expression: anatomy (FBbt) "
                                                                       "and stage (FBdv) terms")] = "go",
    ) -> str:
        """Ontology terms named in a text (dictionary recognition: names, synonyms, word forms, abbreviations the
        text defines): [{term_id, name, aspect, text, start, end, via}] in text order, to turn a quote into ids.
        A molecular function is reported only where the text states an activity. Free; hidden terms are left out."""
        if len(text) > MAX_FIND_TERMS_CHARS:
            return error(f"text is {len(text)} characters; at most {MAX_FIND_TERMS_CHARS}: send one passage.",
                         "invalid_request")

        async def work() -> str:
            res = await awaited(self.api.recognise_terms([text], task=task))   # the session hides its terms
            keep = {"go": ("go",), "expression": ("fbbt", "fbdv")}[task]
            return fit([{"term_id": m.term_id, "name": m.name, "aspect": m.aspect, "text": m.text, "start": m.start,
                         "end": m.end, "via": m.via} for m in res.mentions[0] if m.ontology in keep])

        return await self._call(work)

    async def register_gene_name(
        self,
        names: Annotated[list[str] | str, Field(description="Names of the session's gene found in papers "
                                                            "(historical symbols, full names)")],
    ) -> str:
        """Register names of the gene you found, so that searches with gene= also match them (when the session's
        synonym policy is 'registered'). Registering does not submit them as synonyms."""
        async def work() -> str:
            return dumps(await awaited(self.api.register_names([names] if isinstance(names, str) else names)))

        return await self._call(work)

    async def get_budget(self) -> str:
        """How much of the reading budget is used and left, and which papers were read."""
        async def work() -> str:
            s = await awaited(self.api.get_session())
            return dumps({"used": s.budget_used, "max_papers": s.max_papers, "left": s.budget_left,
                          "budget_policy": s.budget_policy, "papers_read": s.papers_read, "status": s.status})

        return await self._call(work)

    async def submit_annotations(
        self,
        annotations: Annotated[dict[str, Any] | str, Field(
            description="The complete prediction: {gene_id, gene_symbol, task1_function: [...], "
                        "task2_expression: [...], task3_synonyms: {fullname_synonyms: [...], symbol_synonyms: [...]}}"
        )],
    ) -> str:
        """Validate and store your annotations: {valid, errors, warnings, annotation_count}. Fix the errors and
        submit again if valid is false; the last valid submission is the run's output. Warnings point at ids
        that score nothing (unknown, obsolete with replacements) and items past the scored ranks (GO 30,
        anatomy 10, synonyms 20)."""
        prediction: Any = annotations  # the service checks its shape
        if isinstance(prediction, str):
            try:
                prediction = json.loads(prediction)
            except json.JSONDecodeError as exc:
                return error(f"annotations is not valid JSON ({exc}); pass the prediction object itself.",
                             "invalid_request")

        async def work() -> str:
            report = await awaited(self.api.submit(prediction))
            return dumps(report.model_dump(include={"valid", "errors", "warnings", "annotation_count"}))

        return await self._call(work)

    async def list_supplements(
        self, pmcid: Annotated[str, Field(description="The paper, e.g. PMC1440717")],
    ) -> str:
        """List a paper's supplementary files: [{file (number), name, label, caption, status, reason, parts:
        [{part, name, unit, first, last, header}]}]. Status ok/partial files can be read with read_supplement.
        Listing is free."""
        async def work() -> str:
            res = await awaited(self.api.list_supplements(pmcid.strip()))
            return fit([{"file": f.index, "name": f.name, "label": f.label, "caption": f.caption,
                         "status": f.status, "reason": f.reason,
                         "parts": [{"part": p.index, "name": p.name, "unit": p.unit, "first": p.first,
                                    "last": p.last, "header": p.header} for p in f.parts]} for f in res.files])

        return await self._call(work)

    async def read_supplement(
        self,
        pmcid: Annotated[str, Field(description="The paper, e.g. PMC1440717")],
        file: Annotated[int | str, Field(description="File number from list_supplements, or its name")],
        part: Annotated[int | str | None, Field(description="Sheet or part number (0 first) or name; default the "
                                                            "first")] = None,
        start: Annotated[int | None, Field(description="First row, paragraph or page number to return; "
                                                       "next_start of the previous page continues")] = None,
        limit: Annotated[int, Field(description=f"Rows per page, 1-{MAX_SUPPLEMENT_ROWS}")] = 50,
    ) -> str:
        """Read a sheet, table, text or PDF pages of a supplementary file: {file, part, header, rows: [{n,
        cells}], next_start}. A table comes with its header, so tables can be joined by column. Reading a
        supplement reads its paper: it spends the paper's budget like get_paper_text (free if already read)."""
        if msg := _bounded("limit", limit, 1, MAX_SUPPLEMENT_ROWS):
            return error(msg, "invalid_request")

        async def work() -> str:
            page = await awaited(self.api.read_supplement(pmcid.strip(), file, part=part, start=start,
                                                          limit=limit, max_chars=MAX_RESULT_CHARS // 2))
            out: dict[str, Any] = {"pmcid": page.pmcid, "file": page.file.index, "name": page.file.name,
                                   "part": page.part.index, "sheet": page.part.name, "unit": page.part.unit,
                                   "header": page.part.header, "rows": [r.model_dump() for r in page.rows],
                                   "next_start": page.next_start}
            if page.truncated_cells:
                out["truncated_cells"] = page.truncated_cells
            return dumps(out)

        return await self._call(work)

    #: the tools of a session that is not FlyAOC parity (``flyaoc`` budget): FlyAOC's reference has no supplements
    SUPPLEMENT_TOOLS = ("list_supplements", "read_supplement")

    TOOLS = ("search_corpus", "get_paper_text", "search_go_terms", "search_anatomy_terms", "search_stage_terms",
             "get_term_children", "submit_annotations", "search_passages", "find_terms", "register_gene_name",
             "get_budget")


def instructions(session: Session) -> str:
    return (f"flysift literature tools for one curation session ({session.id}): gene {session.gene.symbol} "
            f"({session.gene.id}), reading budget {session.max_papers} papers ({session.budget_policy} policy). "
            "Search freely with search_corpus and "
            "search_passages, read with get_paper_text, map findings with search_go_terms / search_anatomy_terms / "
            "search_stage_terms, and submit the complete prediction with submit_annotations.")


SYNTAX_NOTE = (" Searches read the query language: +word must match, -word must not, AND OR NOT (capitals) and "
               "parentheses, \"phrases\", title:, abstract:, gene:, year:2005..2010, section:results.")


def build_server(api: AsyncClient, session: Session, query_syntax: bool = False) -> MCPServer:
    """An MCPServer exposing :class:`SessionTools` for ``session``; ``query_syntax`` turns the query language on for
    its searches (off by default: agents keep the plain-text reading, and FlyAOC parity runs never turn it on)."""
    from mcp.server.mcpserver import MCPServer

    from search import __version__

    tools = SessionTools(api, session, query_syntax=query_syntax)
    server = MCPServer("flysift", instructions=instructions(session) + (SYNTAX_NOTE if query_syntax else ""),
                       version=__version__, log_level="WARNING")
    names = SessionTools.TOOLS + (SessionTools.SUPPLEMENT_TOOLS if session.budget_policy != "flyaoc" else ())
    for name in names:
        server.add_tool(getattr(tools, name), name=name, structured_output=False)
    return server


def where(place: SupplementPlace) -> dict[str, Any]:
    """A supplement passage's place as agents read it: file, sheet and rows (or pages, paragraphs)."""
    out: dict[str, Any] = {"file": place.file_index, "name": place.file, "sheet": place.sheet}
    for key in ("rows", "pages", "paragraphs"):
        if (value := getattr(place, key)) is not None:
            out[key] = list(value)
    return out
