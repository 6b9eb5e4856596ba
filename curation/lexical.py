"""The lexical curator (``--agent lexical``): no model at all, so it runs offline and costs nothing.

It is the floor every LLM harness must beat and a load generator for the service. It reads like a careful but
literal curator: find the gene's papers, read the best within the budget, keep the sentences that name the gene,
have the service recognise ontology terms in them (``POST /v1/terms/recognise``: GO for the GO task, FBbt and FBdv
for expression; the recogniser's rules live in ``search.ontology.recognise``), rank the candidates by their
evidence and submit; it takes the gene's other names from what the papers say ("X, also known as Y", "Y (X)",
"formerly Y", "the Y gene product"), never from the lexicon. Every rule and weight below is set a priori; none is
fitted to any gold standard.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from curation.agent import GeneResult, GeneTask, empty_usage, register
from search.client import BudgetExhausted, Client, ClientError, InvalidRequestError, NotFoundError
from search.core.models import PaperText
from search.schema.terms import TermInfo

#: section weights: results carry the findings, the introduction mostly what others found
SECTION_WEIGHT = {"TITLE": 1.0, "ABSTRACT": 1.0, "RESULTS": 1.0, "FIG": 0.9, "TABLE": 0.9, "DISCUSS": 0.7,
                  "CONCL": 0.7, "CASE": 0.7, "INTRO": 0.4, "METHODS": 0.3}
OTHER_SECTION_WEIGHT = 0.3
#: the distance (characters) at which a term mention counts half as much as one right next to the gene
HALF_DISTANCE = 60.0
GO_QUALIFIER = {"P": "involved_in", "F": "enables", "C": "located_in"}
#: the recognition tasks and the ontologies whose mentions each keeps (resolve per task: a label GO and FBbt share
#: is the GO term for the GO task, the FBbt term for expression; the service's order for each task decides)
TASKS = {"go": ("go",), "expression": ("fbbt", "fbdv")}


@dataclass(frozen=True)
class Found:
    """A term the service recognised in a unit: offsets into the unit's text, and its sentence."""

    term: TermInfo
    start: int
    end: int
    sentence: tuple[int, int]


# ---- evidence and ranking --------------------------------------------------------------------------------------------

@dataclass
class Unit:
    """A paragraph as read: where it is (passage id = PMCID:section index:paragraph index) and its text."""

    pmcid: str
    section: str
    passage_id: str
    text: str


def paper_units(page: PaperText) -> list[Unit]:
    """The paragraphs of a read paper, numbered like the service's passages (abstract 0, body sections from 1)."""
    units = [Unit(page.pmcid, "TITLE", f"{page.pmcid}:title", page.title)] if page.title else []
    if page.abstract:
        units.append(Unit(page.pmcid, "ABSTRACT", f"{page.pmcid}:0:0", page.abstract))
    for si, sec in enumerate(page.sections, start=1):
        units += [Unit(page.pmcid, sec.type, f"{page.pmcid}:{si}:{pi}", p) for pi, p in enumerate(sec.paragraphs)]
    return units


def gene_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    """Whole-name matches: symbols case-sensitive (``Dl`` is not ``dl``), multi-word full names case-insensitive."""
    alts = []
    for n in sorted({n.strip() for n in names if n and n.strip()}, key=len, reverse=True):
        esc = re.escape(n)
        alts.append(f"(?i:{esc})" if " " in n else esc)
    if not alts:
        return None
    return re.compile(r"(?<![\w\-])(?:" + "|".join(alts) + r")(?![\w\-])")


@dataclass
class Candidate:
    term: TermInfo
    papers: set[str] = field(default_factory=set)
    mentions: int = 0
    weight: float = 0.0
    best: tuple[float, dict[str, Any]] | None = None

    def score(self, max_depth: int) -> float:
        """Distinct papers first, then the weighted mentions, then specificity (deeper terms say more)."""
        return len(self.papers) + 0.5 * self.weight + 0.1 * (self.term.depth / max(1, max_depth))


def recognise(client: Client, units: list[Unit], task: str) -> list[list[Found]]:
    """The terms of ``task`` the service recognises in each unit, one request per paper (a paper's abbreviations
    count in all its paragraphs). Asked inside the session (recognition spends nothing; the call is traced), so
    the session's hidden terms are never recognised: the curator cannot learn a hidden term's name from the
    service and propose it as a description."""
    out: list[list[Found]] = [[] for _ in units]
    by_paper: dict[str, list[int]] = defaultdict(list)
    for i, u in enumerate(units):
        by_paper[u.pmcid].append(i)
    for idx in by_paper.values():
        for part, found in _recognise_part(client, [units[i].text for i in idx], task):
            out[idx[part]] = found
    return out


def _recognise_part(client: Client, texts: list[str], task: str) -> list[tuple[int, list[Found]]]:
    """One recognition request; a document over the service's bounds is sent in halves."""
    try:
        res = client.recognise_terms(texts, task=task)  # type: ignore[arg-type]
    except InvalidRequestError as e:
        if e.code != "limit_exceeded" and not (e.code == "invalid_request" and len(texts) > 1):
            raise
        if len(texts) == 1:
            return [(0, [])]  # one paragraph over the bounds: left out, never the end of the gene
        half = len(texts) // 2
        return _recognise_part(client, texts[:half], task) + \
            [(half + n, f) for n, f in _recognise_part(client, texts[half:], task)]
    except NotFoundError:
        return [(n, []) for n in range(len(texts))]  # the task's ontologies are not indexed: nothing to find
    return [(n, [Found(TermInfo.of(m), m.start, m.end,
                       (m.sentence_start, m.sentence_end)) for m in ms]) for n, ms in enumerate(res.mentions)]


def collect(units: list[Unit], gene: re.Pattern[str], found: list[list[Found]]) -> dict[str, Candidate]:
    """Term mentions in sentences that name the gene, weighted by section and distance to the gene mention."""
    cands: dict[str, Candidate] = {}
    for u, mentions in zip(units, found, strict=True):
        by_sentence: dict[tuple[int, int], list[Found]] = defaultdict(list)
        for f in mentions:
            by_sentence[f.sentence].append(f)
        for (s, e), group in by_sentence.items():
            sent = u.text[s:e]
            genes = [s + m.start() for m in gene.finditer(sent)]
            if not genes:
                continue
            for tm in group:
                dist = min(abs(g - tm.start) for g in genes)
                w = SECTION_WEIGHT.get(u.section, OTHER_SECTION_WEIGHT) * HALF_DISTANCE / (HALF_DISTANCE + dist)
                c = cands.setdefault(tm.term.id, Candidate(tm.term))
                c.papers.add(u.pmcid)
                c.mentions += 1
                c.weight += w
                if c.best is None or w > c.best[0]:
                    c.best = (w, {"pmcid": u.pmcid, "section": u.section, "passage_id": u.passage_id,
                                  "start": tm.start, "end": tm.end, "text": sent[:500]})
    return cands


def ranked(cands: dict[str, Candidate]) -> list[Candidate]:
    depth = max((c.term.depth for c in cands.values()), default=1)
    return sorted(cands.values(), key=lambda c: (-c.score(depth), c.term.id))


# ---- synonyms: the names a paper gives the gene ----------------------------------------------------------------------
#
# Only what the text states, anchored on the gene's symbol and current full name (X); never a name taken from the
# lexicon (the answer key). A-priori English patterns of naming:
#   "X (also known as Y)", "X, also called Y", "X (formerly Y)", "X, previously known as Y", "X (aka Y)"
#   "X (Y)"  - a symbol-shaped alias in brackets after the name,
#   "Y (X)"  - the name the bracketed symbol abbreviates (Y's letters hold X's in order, Y starting with X's first),
#   "X, the Y gene product" / "the Y gene product, X".
# A slash ("ey/Pax6") is not taken: in fly papers it writes genotypes (ey/+, ey/CyO).

_ALIAS_WORDS = (r"(?:also (?:known as|called|named|termed|referred to as)|a\.?k\.?a\.?|alias|formerly(?: known as|"
                r" called| named)?|previously (?:known as|called|named)|originally (?:named|called|known as))")
#: a name: a symbol-like token or up to five words
_Y = r"([A-Za-z0-9][\w\-()':.]{0,30}?(?: [\w\-']+){0,4}?)"
#: a symbol-shaped bracketed alias: one token with a capital, a digit or a hyphen inside
_SYMBOL = re.compile(r"^[A-Za-z][\w\-:.'()]{0,19}$")
#: bracket contents that are never names: figure and table references, abbreviations of Latin, statistics
_NOT_A_NAME = re.compile(r"^(?:figs?|figures?|tables?|supp\w*|see|e\.?g|i\.?e|cf|n|p|ref|refs|data|left|right|"
                         r"top|bottom|arrows?|arrowheads?|asterisks?)\b", re.I)
#: English words that never name a gene
_STOP = frozenset("a an and as at be by for in is it of on or the to with we was were this that these".split())


@dataclass
class SynonymPatterns:
    """The naming patterns for one gene's symbol and full name (see above)."""

    symbol: str
    fullname: str | None

    def __post_init__(self) -> None:
        anchors = [n for n in {self.symbol, self.fullname or ""} if n.strip()]
        self.own = {n.lower() for n in anchors}
        self.alias: list[re.Pattern[str]] = []
        self.bracket_after: list[re.Pattern[str]] = []
        for n in anchors:
            x = re.escape(n)
            edge = r"(?<![\w\-])"
            self.alias += [re.compile(edge + x + r"\s*\(\s*" + _ALIAS_WORDS + r"\s+" + _Y + r"\s*\)"),
                           re.compile(edge + x + r",?\s+" + _ALIAS_WORDS + r"\s+" + _Y + r"(?=[,;.)]|\s+(?:and|is|"
                                                                                       r"was|in|has)\b)"),
                           re.compile(edge + x + r"(?:,|\s*\()\s*the\s+" + _Y + r"\s+gene product"),
                           re.compile(r"\bthe\s+" + _Y + r"\s+gene product(?:,|\s*\()\s*" + x + r"(?![\w\-])")]
            self.bracket_after.append(re.compile(edge + x + r"\s*\(\s*([^()\s,;]{2,20})\s*\)"))
        self.bracket_before = re.compile(r"((?:[\w\-']+ ){0,4}[\w\-']+)\s*\(\s*" + re.escape(self.symbol)
                                         + r"\s*\)") if self.symbol.strip() else None

    def find(self, text: str) -> list[tuple[str, int]]:
        """(name, offset) of every name the text gives the gene."""
        out: list[tuple[str, int]] = []
        for p in self.alias:
            out += [(m.group(1), m.start()) for m in p.finditer(text)]
        for p in self.bracket_after:
            out += [(m.group(1), m.start()) for m in p.finditer(text)
                    if _SYMBOL.match(m.group(1)) and not _NOT_A_NAME.match(m.group(1))
                    and any(c.isupper() or c.isdigit() or c == "-" for c in m.group(1))]
        if self.bracket_before is not None:
            for m in self.bracket_before.finditer(text):
                long = _abbreviated(self.symbol, m.group(1))
                if long:
                    out.append((long, m.start()))
        return [(n, at) for n, at in ((n.strip(" ,;.'"), at) for n, at in out)
                if n and n.lower() not in self.own and n.lower() not in _STOP and len(n.split()) <= 5]


def _abbreviated(short: str, words: str) -> str | None:
    """The long form ``short`` abbreviates at the end of ``words`` (Schwartz & Hearst 2003): its characters found in
    order scanning backwards, the first one at the start of a word, at most min(len + 5, 2 len) words; a long form
    holding the short form itself as a word is the name followed by other words, not a long form. None if none."""
    chars = [c.lower() for c in short if c.isalnum()]
    if not chars or not chars[0].isalpha():
        return None
    text = words.lower()
    i = len(text) - 1
    for n in range(len(chars) - 1, -1, -1):
        while i >= 0 and (text[i] != chars[n] or (n == 0 and i > 0 and text[i - 1].isalnum())):
            i -= 1
        if i < 0:
            return None
        i -= 1
    start = words.rfind(" ", 0, i + 2) + 1
    long = words[start:].strip()
    parts = long.split()
    if not parts or len(parts) > min(len(chars) + 5, 2 * len(chars)) or short.lower() in (w.lower() for w in parts):
        return None
    return long


def find_synonyms(units: Iterable[Unit], symbol: str, fullname: str | None
                  ) -> tuple[list[str], list[str], dict[str, dict[str, Any]]]:
    """(full-name synonyms, symbol synonyms, evidence per name): the names the papers give the gene, most often
    stated first; a name with a space, or a lower-case word longer than six letters, is a full name."""
    pats = SynonymPatterns(symbol, fullname)
    counts: dict[str, int] = defaultdict(int)
    evidence: dict[str, dict[str, Any]] = {}
    for u in units:
        for name, at in pats.find(u.text):
            counts[name] += 1
            if name not in evidence:
                s = max(0, u.text.rfind(". ", 0, at) + 2) if at else 0
                evidence[name] = {"pmcid": u.pmcid, "passage_id": u.passage_id, "text": u.text[s:s + 500]}
    order = sorted(counts, key=lambda s: (-counts[s], s))
    full = [s for s in order if " " in s or (s.islower() and len(s) > 6)]
    return full, [s for s in order if s not in full], {n: evidence[n] for n in order}


# ---- the agent -------------------------------------------------------------------------------------------------------

class LexicalCurator:
    """``--agent lexical``. Options: ``search_limit`` (papers considered, default 100)."""

    name = "lexical"

    def __init__(self, options: dict[str, Any] | None = None):
        self.options = dict(options or {})

    def run(self, task: GeneTask, client: Client) -> GeneResult:
        started = time.monotonic()
        result = GeneResult(gene_id=task.gene_id, output=None, usage={**empty_usage(), "cost_usd": 0.0})
        try:
            session = client.create_session(**task.session_options(), label=f"lexical {task.gene_id}")
            client.session_id = result.session_id = session.id
            result.extra["gene_symbol"] = task.symbol or session.gene.symbol
            try:
                result.output = self.curate(task, client, session.gene.symbol, session.gene.fullname, result)
            finally:
                result.usage["papers_read"] = len(client.close_session().papers_read)
        except ClientError as e:
            result.error = f"{type(e).__name__}: {e}"
        result.elapsed_s = round(time.monotonic() - started, 3)
        return result

    def curate(self, task: GeneTask, client: Client, symbol: str, fullname: str | None,
               result: GeneResult | None = None) -> dict[str, Any] | None:
        limit = int(self.options.get("search_limit", 100))
        names = {symbol, fullname or ""}
        papers = client.search_papers(symbol, limit=min(limit, 100), gene=task.gene_id).hits
        passages = client.search_passages(symbol, limit=100, gene=task.gene_id).hits
        names.update(m for h in papers for m in h.matched)   # the names that found the papers: to spot the gene
        names.update(m for h in passages for m in h.matched)
        names.discard("")
        per_paper: dict[str, int] = defaultdict(int)
        for ph in passages:
            per_paper[ph.pmcid] += 1
        order = sorted(papers, key=lambda h: (not h.gene_in_title, -h.score, -per_paper[h.pmcid], h.pmcid))
        units: list[Unit] = []
        for hit in order[:task.budget]:
            try:
                units += [u for page in client.iter_paper_pages(hit.pmcid, max_chars=1_000_000)
                          for u in paper_units(page)]
            except BudgetExhausted:
                break
        read = {u.pmcid for u in units}
        units += [Unit(p.pmcid, p.section_type, p.passage_id, p.text) for p in passages if p.pmcid not in read]
        gene = gene_pattern(names)
        cands: dict[str, list[Candidate]] = {t: [] for t in TASKS}
        if gene:
            for t, keep in TASKS.items():
                found = [[f for f in fs if f.term.ontology in keep] for fs in recognise(client, units, t)]
                cands[t] = ranked(collect(units, gene, found))
        full, symbols, evidence = find_synonyms(units, symbol, fullname)
        if result is not None:
            result.extra["synonym_evidence"] = evidence
        prediction = {"gene_id": task.gene_id, "gene_symbol": symbol,
                      "task1_function": self._go_items(client, cands["go"]),
                      "task2_expression": self._expression_items(cands["expression"]),
                      "task3_synonyms": {"fullname_synonyms": full, "symbol_synonyms": symbols}}
        report = client.submit(prediction)
        return prediction if report.valid else None

    @staticmethod
    def _evidence(c: Candidate) -> dict[str, Any]:
        ev = dict(c.best[1]) if c.best else {}
        return ev if str(ev.get("pmcid", "")).startswith("PMC") else {k: v for k, v in ev.items() if k != "pmcid"}

    def _go_items(self, client: Client, cands: list[Candidate]) -> list[dict[str, Any]]:
        """GO candidates confirmed by id lookup in the session; a term the session hides becomes a description."""
        items = []
        for c in cands:
            aspect = c.term.aspect or "P"
            item: dict[str, Any] = {"qualifier": GO_QUALIFIER[aspect], "aspect": aspect, "is_negated": False,
                                    "evidence": self._evidence(c)}
            try:
                client.get_term(c.term.id)
                item["go_id"] = c.term.id
            except NotFoundError:
                item["description"] = c.term.name[:100]
            items.append(item)
        return items

    def _expression_items(self, cands: list[Candidate]) -> list[dict[str, Any]]:
        """One item per anatomy term, with the best-supported stage named in the same paper (if any)."""
        stages = [c for c in cands if c.term.ontology == "fbdv"]
        items = []
        for c in (c for c in cands if c.term.ontology == "fbbt"):
            stage = next((s for s in stages if s.papers & c.papers), None)
            text = (c.best[1]["text"] if c.best else "").lower()
            kind = "transcript" if re.search(r"\b(?:mrna|transcripts?|in situ)\b", text) else "polypeptide"
            items.append({"expression_type": kind, "anatomy_id": c.term.id,
                          "stage_id": stage.term.id if stage else None, "evidence": self._evidence(c)})
        return items


register("lexical", LexicalCurator)
