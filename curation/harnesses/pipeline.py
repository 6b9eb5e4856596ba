"""FlyAOC's fixed Pipeline harness: search → read → extract per paper → resolve ids → compile → submit.

No agentic choice: the gene's papers are searched once (``search_corpus`` with the gene's names), the top ones are
read until the budget is spent (papers with the gene in the title first, then by score), the model extracts
plain-language findings from each paper (one call per paper, concurrently, each its own stream; the title, abstract
and every section, cut at ``extract_chars``), each finding is resolved to the top hit of the term search, and the
deduplicated result is submitted. Every model call is a turn.

Under ``parity`` it reads as FlyAOC's pipeline does: the symbol (20 hits) and then the gene id (10 hits) searched
without name expansion, the hits kept in search order, the first ``budget`` read whole; each extraction sees the
abstract, RESULTS, INTRO and DISCUSS in that order, cut at 8,000 characters.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from curation.agent import GeneTask
from curation.harnesses import prompts
from curation.harnesses.base import TERM_TOOLS, Harness, RunContext
from curation.llm import LimitReached, parse_json_object

ASPECTS = {"biological_process": "P", "molecular_function": "F", "cellular_component": "C"}


class Pipeline(Harness):
    """Options beyond :class:`Harness`'s: ``search_limit`` (default 20), ``extract_chars`` (text per extraction,
    default 12000)."""

    name = "pipeline"

    def expected_calls(self, task: GeneTask, paper_tokens: int) -> list[tuple[str, int, int]]:
        return [("", task.budget, min(paper_tokens, int(self.options.get("extract_chars", 12_000)) // 4) + 500)]

    async def curate(self, ctx: RunContext) -> dict[str, Any] | None:
        tools = await ctx.tools(("search_corpus", "get_paper_text", *TERM_TOOLS, "submit_annotations"))
        task = ctx.task
        if task.parity:  # FlyAOC: the symbol, then the gene id, unexpanded; search order kept
            ranked = await _hits(tools, {"query": task.symbol, "limit": 20})
            ranked += await _hits(tools, {"query": task.gene_id, "limit": 10})
        else:
            hits = await _hits(tools, {"query": task.symbol, "gene": task.symbol,
                                       "limit": int(self.options.get("search_limit", 20))})
            ranked = sorted(hits, key=lambda h: (not h.get("gene_in_title"), -h.get("relevance_score", 0)))
        papers: dict[str, dict[str, Any]] = {}
        for hit in _unique(ranked):
            if len(papers) >= task.budget:
                break
            page = json.loads(await tools.call("get_paper_text", {"pmcid": hit["pmcid"]}))
            if page.get("code") == "budget_exhausted":
                break
            if "error" not in page:
                papers[hit["pmcid"]] = page
        if len(papers) > task.max_turns:
            raise LimitReached("turns", f"turn limit reached ({task.max_turns} model calls for {len(papers)} papers)")
        found = await asyncio.gather(*(self._extract(ctx, pmcid, page) for pmcid, page in papers.items()))
        output = await self._compile(ctx, tools, found)
        await tools.call("submit_annotations", {"annotations": output})
        return None

    async def _extract(self, ctx: RunContext, pmcid: str, page: dict[str, Any]) -> dict[str, Any]:
        if ctx.task.parity:
            text = parity_text(page)
        else:
            limit = int(self.options.get("extract_chars", 12_000))
            text = "\n\n".join([page.get("title") or "", page.get("abstract") or ""]
                               + [f"{name}:\n" + "\n".join(paras)
                                  for name, paras in (page.get("sections") or {}).items()])[:limit]
        messages = [{"role": "system", "content": prompts.EXTRACT_SYSTEM},
                    {"role": "user", "content": prompts.extract_prompt(ctx.task, pmcid, text)}]
        message = await ctx.llm.chat(ctx.config, f"agent:extract:{pmcid}", messages)
        return {"pmcid": pmcid, **(parse_json_object(message.get("content")) or {})}

    async def _compile(self, ctx: RunContext, tools: Any, found: list[dict[str, Any]]) -> dict[str, Any]:
        go: dict[tuple[str, str], dict[str, Any]] = {}
        expression: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
        synonyms: list[str] = []
        for paper in found:
            for f in _items(paper.get("function_annotations")):
                term = await _top(tools, "search_go_terms", f.get("function_description"), f.get("aspect"))
                if term:
                    aspect = ASPECTS.get(term.get("namespace", ""), f.get("aspect") or "P")
                    go.setdefault((term["go_id"], aspect), {
                        "go_id": term["go_id"], "qualifier": _qualifier(f.get("qualifier"), aspect), "aspect": aspect,
                        "is_negated": bool(f.get("is_negated")), "evidence": _evidence(paper["pmcid"], f)})
            for e in _items(paper.get("expression_annotations")):
                anatomy = await _top(tools, "search_anatomy_terms", e.get("anatomy_description"))
                stage = await _top(tools, "search_stage_terms", e.get("stage_description"))
                if anatomy or stage:
                    kind = e.get("expression_type") if e.get("expression_type") in ("polypeptide", "transcript") \
                        else "polypeptide"
                    key = (kind, anatomy and anatomy["fbbt_id"], stage and stage["fbdv_id"])
                    expression.setdefault(key, {"expression_type": kind, "anatomy_id": key[1], "stage_id": key[2],
                                                "evidence": _evidence(paper["pmcid"], e)})
            synonyms += [s.strip() for s in paper.get("synonyms") or [] if isinstance(s, str) and s.strip()]
        names = [s for s in dict.fromkeys(synonyms) if s.lower() != ctx.task.symbol.lower()]
        return {"gene_id": ctx.task.gene_id, "gene_symbol": ctx.task.symbol, "task1_function": list(go.values()),
                "task2_expression": list(expression.values()),
                "task3_synonyms": {"fullname_synonyms": [s for s in names if _is_full_name(s)],
                                   "symbol_synonyms": [s for s in names if not _is_full_name(s)]}}


#: FlyAOC's pipeline: the sections an extraction sees, in this order, and where their text is cut
PARITY_SECTIONS = ("RESULTS", "INTRO", "DISCUSS")
PARITY_CHARS = 8000
PARITY_CUT_MARK = "\n... [truncated]"


def parity_text(page: dict[str, Any]) -> str:
    """What FlyAOC's pipeline gives one extraction call: the abstract, then RESULTS, INTRO and DISCUSS (no title,
    no methods), each headed by its name, cut at :data:`PARITY_CHARS` with a mark."""
    parts = [f"ABSTRACT:\n{page['abstract']}"] if page.get("abstract") else []
    sections = page.get("sections") or {}
    parts += [f"{name}:\n" + "\n".join(sections[name]) for name in PARITY_SECTIONS if sections.get(name)]
    text = "\n\n".join(parts)
    return text[:PARITY_CHARS] + PARITY_CUT_MARK if len(text) > PARITY_CHARS else text


async def _hits(tools: Any, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    hits = json.loads(await tools.call("search_corpus", arguments))
    return [h for h in hits if isinstance(h, dict)] if isinstance(hits, list) else []


def _unique(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hits in order, each paper once."""
    seen: set[str] = set()
    out = []
    for h in hits:
        if isinstance(h.get("pmcid"), str) and h["pmcid"] not in seen:
            seen.add(h["pmcid"])
            out.append(h)
    return out


def _items(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


async def _top(tools: Any, tool: str, query: Any, aspect: Any = None) -> dict[str, Any] | None:
    """The best term for a description (the pipeline resolves without judgement), or None."""
    if not isinstance(query, str) or not query.strip():
        return None
    args: dict[str, Any] = {"query": query.strip(), "limit": 3}
    if tool == "search_go_terms" and aspect in ("P", "F", "C"):
        args["aspect"] = aspect
    hits = json.loads(await tools.call(tool, args))
    return hits[0] if isinstance(hits, list) and hits else None


QUALIFIERS = {"F": ("enables", "contributes_to"), "P": ("involved_in", "acts_upstream_of_or_within"),
              "C": ("located_in", "part_of", "is_active_in", "colocalizes_with")}


def _qualifier(given: Any, aspect: str) -> str:
    return given if given in QUALIFIERS[aspect] else QUALIFIERS[aspect][0]


def _evidence(pmcid: str, item: dict[str, Any]) -> dict[str, Any]:
    return {"pmcid": pmcid, "text": str(item.get("evidence_text") or "")[:500]}


def _is_full_name(name: str) -> bool:
    """Full names are words (``Abdominal A``, ``decapentaplegic``); symbols short or mixed (``abd-A``, ``iab-4``)."""
    return " " in name or (len(name) > 8 and name.isalpha() and name.islower())
