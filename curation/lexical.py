"""The lexical curator (``--agent lexical``): no model at all, so it runs offline and costs nothing.

It is the floor every LLM harness must beat and a load generator for the service. It reads like a careful but
literal curator: find the gene's papers, read the best within the budget, keep the sentences that name the gene,
recognise ontology terms in them by longest match over the labels the term service publishes, rank the candidates by
their evidence and submit. Every rule and weight below is set a priori; none is fitted to any gold standard.
"""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from curation.agent import GeneResult, GeneTask, empty_usage, register
from search.client import LABEL_PAGE_SIZE, BudgetExhausted, Client, ClientError, NotFoundError
from search.core.models import PaperText

# ---- text units ------------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"[A-Za-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[])")
#: a bracketed short form right after a long form: "endoplasmic reticulum (ER)"
_ABBREV = re.compile(r"\(\s*([A-Za-z][A-Za-z0-9\-]{1,9})\s*[);,]")
#: English words that are also ontology labels or synonyms but in running text almost never name the concept
_STOP = frozenset("a an and as at be by for in is it of on or the to with we was were this that these".split())
#: section weights: results carry the findings, the introduction mostly what others found
SECTION_WEIGHT = {"TITLE": 1.0, "ABSTRACT": 1.0, "RESULTS": 1.0, "FIG": 0.9, "TABLE": 0.9, "DISCUSS": 0.7,
                  "CONCL": 0.7, "CASE": 0.7, "INTRO": 0.4, "METHODS": 0.3}
OTHER_SECTION_WEIGHT = 0.3
#: the distance (characters) at which a term mention counts half as much as one right next to the gene
HALF_DISTANCE = 60.0
GO_QUALIFIER = {"P": "involved_in", "F": "enables", "C": "located_in"}


def _norm(token: str) -> str:
    """Lower case and fold regular English/Latin plurals, so "nuclei" meets "nucleus" and "cells" meets "cell"."""
    t = token.lower()
    if len(t) <= 3 or not t.isalpha():
        return t
    if t.endswith("ies") and len(t) > 4:
        return t[:-3] + "y"
    if t.endswith("ei") or (t.endswith("i") and not t.endswith("ii")):
        return t[:-1] + "us"
    if t.endswith(("sses", "xes", "ches", "shes")):
        return t[:-2]
    if t.endswith("s") and not t.endswith(("ss", "us", "is", "ous")):
        return t[:-1]
    return t


def tokens(text: str) -> list[tuple[str, int, int]]:
    """(normalised token, start, end) over alphanumeric runs; hyphens and slashes separate tokens."""
    return [(_norm(m.group()), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def sentences(text: str) -> Iterator[tuple[int, int]]:
    """[start, end) of each sentence (a light splitter: ., ! or ? then space and a capital or bracket)."""
    start = 0
    for m in _SENTENCE_END.finditer(text):
        yield start, m.start()
        start = m.end()
    if start < len(text):
        yield start, len(text)


# ---- the term dictionary (from the term service) ---------------------------------------------------------------------

@dataclass(frozen=True)
class TermInfo:
    id: str
    ontology: str
    name: str
    aspect: str | None
    depth: int


@dataclass(frozen=True)
class TermMatch:
    term: TermInfo
    start: int
    end: int
    text: str
    via: str  # "name", "synonym" or "abbreviation"


@dataclass
class TermDictionary:
    """Names and synonyms of every live term, keyed by their normalised token sequence. Short labels written
    with capitals (``ER``, ``Golgi``) are kept case-sensitive so that ordinary words do not match them."""

    terms: dict[str, TermInfo]
    labels: dict[tuple[str, ...], list[tuple[str, str]]] = field(default_factory=dict)  # key -> [(term id, via)]
    cased: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    max_len: int = 1

    def add(self, term_id: str, label: str, via: str) -> None:
        toks = tuple(t for t, _, _ in tokens(label))
        if not toks or (len(toks) == 1 and (toks[0] in _STOP or len(toks[0]) < 3)):
            return
        if len(label) <= 5 and any(c.isupper() for c in label) and " " not in label:
            self.cased.setdefault(label, []).append((term_id, via))
            return
        self.labels.setdefault(toks, []).append((term_id, via))
        self.max_len = max(self.max_len, len(toks))

    @classmethod
    def from_service(cls, client: Client, ontologies: Iterable[str] | None = None,
                     page_size: int = LABEL_PAGE_SIZE) -> TermDictionary:
        """Every live term of ``ontologies`` (default: all the service indexes) from the bulk label export
        (``GET /v1/terms/{ontology}/labels``): a few pages per ontology instead of a lookup per term."""
        names = list(ontologies) if ontologies is not None else sorted(client.stats().terms)
        out = cls(terms={})
        for ont in names:
            for page in client.iter_term_labels(ont, page_size=page_size):
                out.extend(ont, page.terms)
        return out

    @classmethod
    def build(cls, terms: Iterable[Any]) -> TermDictionary:
        """From term records (``search.core.models.Term``); obsolete terms left out."""
        out = cls(terms={})
        for t in terms:
            if not t.obsolete:
                out.extend(t.ontology, [t])
        return out

    def extend(self, ontology: str, records: Iterable[Any]) -> None:
        """Add live term records (``TermLabels`` or ``Term``) of ``ontology``: names and synonyms of every scope but
        BROAD (a broader label names another concept)."""
        for t in records:
            if t.id in self.terms:
                continue
            self.terms[t.id] = TermInfo(t.id, ontology, t.name, t.aspect, t.depth)
            self.add(t.id, t.name, "name")
            for syn in t.synonyms:
                if syn.scope != "BROAD":
                    self.add(t.id, syn.text, "synonym")

    def find(self, text: str, abbreviations: dict[str, str] | None = None) -> list[TermMatch]:
        """Leftmost-longest, non-overlapping matches of labels (and of the paper's own abbreviations) in ``text``."""
        toks = tokens(text)
        raw = [text[s:e] for _, s, e in toks]
        out: list[TermMatch] = []
        i = 0
        while i < len(toks):
            hit = None
            for n in range(min(self.max_len, len(toks) - i), 0, -1):
                found = self.labels.get(tuple(t for t, _, _ in toks[i:i + n]))
                if found:
                    hit = (n, found[0])
                    break
            if hit is None and raw[i] in self.cased:
                hit = (1, self.cased[raw[i]][0])
            if hit is None and abbreviations and raw[i] in abbreviations:
                hit = (1, (abbreviations[raw[i]], "abbreviation"))
            if hit is None:
                i += 1
                continue
            n, (term_id, via) = hit
            s, e = toks[i][1], toks[i + n - 1][2]
            out.append(TermMatch(self.terms[term_id], s, e, text[s:e], via))
            i += n
        return out

    def abbreviations(self, text: str) -> dict[str, str]:
        """Short forms the text defines for a recognised term: "endoplasmic reticulum (ER)" makes ER mean it."""
        out: dict[str, str] = {}
        for m in _ABBREV.finditer(text):
            before = text[max(0, m.start() - 200):m.start()].rstrip()
            matches = self.find(before)
            if matches and matches[-1].end == len(before):
                short = m.group(1)
                initials = "".join(w[0] for w in re.findall(r"[A-Za-z0-9]+", matches[-1].text)).lower()
                if short.lower()[0] == initials[0]:
                    out[short] = matches[-1].term.id
        return out


_DICTIONARIES: dict[tuple[str, tuple[tuple[str, str], ...]], TermDictionary] = {}
_DICT_LOCK = threading.Lock()


def dictionary_for(client: Client) -> TermDictionary:
    """One dictionary per service and label version of each ontology (built once per process, however many genes
    run; a one-term page per ontology tells whether the labels changed)."""
    names = sorted(client.stats().terms)
    key = (client.base_url, tuple((n, client.term_labels(n, limit=1).version) for n in names))
    with _DICT_LOCK:
        if key not in _DICTIONARIES:
            _DICTIONARIES[key] = TermDictionary.from_service(client, names)
        return _DICTIONARIES[key]


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


def collect(units: Iterable[Unit], gene: re.Pattern[str], terms: TermDictionary,
            abbreviations: dict[str, dict[str, str]]) -> dict[str, Candidate]:
    """Term mentions in sentences that name the gene, weighted by section and distance to the gene mention."""
    cands: dict[str, Candidate] = {}
    for u in units:
        for s, e in sentences(u.text):
            sent = u.text[s:e]
            genes = [m.start() for m in gene.finditer(sent)]
            if not genes:
                continue
            for tm in terms.find(sent, abbreviations.get(u.pmcid)):
                dist = min(abs(g - tm.start) for g in genes)
                w = SECTION_WEIGHT.get(u.section, OTHER_SECTION_WEIGHT) * HALF_DISTANCE / (HALF_DISTANCE + dist)
                c = cands.setdefault(tm.term.id, Candidate(tm.term))
                c.papers.add(u.pmcid)
                c.mentions += 1
                c.weight += w
                if c.best is None or w > c.best[0]:
                    c.best = (w, {"pmcid": u.pmcid, "section": u.section, "passage_id": u.passage_id,
                                  "start": s + tm.start, "end": s + tm.end, "text": sent[:500]})
    return cands


def ranked(cands: dict[str, Candidate]) -> list[Candidate]:
    depth = max((c.term.depth for c in cands.values()), default=1)
    return sorted(cands.values(), key=lambda c: (-c.score(depth), c.term.id))


# ---- synonyms --------------------------------------------------------------------------------------------------------

_NAME = r"([A-Za-z0-9][\w\-\(\)':.]{0,30}(?: [\w\-']+){0,4}?)"


def synonym_patterns(names: Iterable[str]) -> list[re.Pattern[str]]:
    """"X (also known as Y)", "X, also called Y", "Y/X", "X (formerly Y)", "X (previously Y)" for each name X."""
    out = []
    for n in {n for n in names if n}:
        x = re.escape(n)
        out += [re.compile(x + r"\s*\((?:also (?:known as|called|named|termed)|a\.?k\.?a\.?|formerly|previously"
                                r"(?: known as| called)?|originally (?:named|called)|alias)\s+" + _NAME + r"\)"),
                re.compile(x + r",?\s+(?:also (?:known as|called|named|termed)|formerly(?: known as| called)?|"
                                r"previously (?:known as|called|named))\s+" + _NAME + r"[,;.)]"),
                re.compile(r"(?<![\w\-/])([A-Za-z][\w\-]{1,15})/" + x + r"(?![\w\-/])"),
                re.compile(r"(?<![\w\-/])" + x + r"/([A-Za-z][\w\-]{1,15})(?![\w\-/])")]
    return out


def find_synonyms(units: Iterable[Unit], names: list[str]) -> tuple[list[str], list[str]]:
    """(full-name synonyms, symbol synonyms), most often seen first; a multi-word lower-case name is a full name."""
    pats = synonym_patterns(names)
    own = {n.lower() for n in names}
    counts: dict[str, int] = defaultdict(int)
    for u in units:
        for p in pats:
            for m in p.finditer(u.text):
                syn = m.group(1).strip(" ,;.")
                if syn and syn.lower() not in own and syn.lower() not in _STOP:
                    counts[syn] += 1
    order = sorted(counts, key=lambda s: (-counts[s], s))
    full = [s for s in order if " " in s or (s.islower() and len(s) > 6)]
    return full, [s for s in order if s not in full]


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
            terms = dictionary_for(client)
            session = client.create_session(**task.session_options(), label=f"lexical {task.gene_id}")
            client.session_id = result.session_id = session.id
            try:
                result.output = self.curate(task, client, terms, session.gene.symbol, session.gene.fullname)
            finally:
                result.usage["papers_read"] = len(client.close_session().papers_read)
        except ClientError as e:
            result.error = f"{type(e).__name__}: {e}"
        result.elapsed_s = round(time.monotonic() - started, 3)
        return result

    def curate(self, task: GeneTask, client: Client, terms: TermDictionary, symbol: str,
               fullname: str | None) -> dict[str, Any] | None:
        limit = int(self.options.get("search_limit", 100))
        names = {symbol, fullname or ""}
        papers = client.search_papers(symbol, limit=min(limit, 100), gene=task.gene_id).hits
        passages = client.search_passages(symbol, limit=100, gene=task.gene_id).hits
        names.update(m for h in papers for m in h.matched)
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
        abbrevs: dict[str, dict[str, str]] = defaultdict(dict)
        for u in units:
            abbrevs[u.pmcid].update(terms.abbreviations(u.text))
        cands = ranked(collect(units, gene, terms, abbrevs)) if gene else []
        full, symbols = find_synonyms(units, sorted(names))
        prediction = {"gene_id": task.gene_id, "gene_symbol": symbol,
                      "task1_function": self._go_items(client, [c for c in cands if c.term.ontology == "go"]),
                      "task2_expression": self._expression_items(cands),
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
