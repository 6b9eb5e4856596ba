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
from search.text.morphology import Morphology

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


#: the key under which a trie node keeps the labels that end there (never a token: tokens are non-empty)
_END = ""
#: a one-word synonym is a rewording of its term's name when it shares this many first letters with a name word
#: (apoptosis / apoptotic process, mitosis / mitotic nuclear division); otherwise it names a related concept
#: ("core" for viral nucleocapsid, "formation" for biosynthetic process). Set a priori, not fitted.
REWORDING_PREFIX = 4
#: derivational endings the shared morphology lacks, applied to label words only (cytoplasm → cytoplasmic)
EXTRA_DERIVATIONS = ("ic",)


def _acronym(label: str) -> bool:
    """A short label without spaces written with capitals (``CNS``, ``ER``, ``Golgi``): matched case-sensitively."""
    return len(label) <= 5 and any(c.isupper() for c in label) and " " not in label


def _rewording(word: str, name: str) -> bool:
    return any(w[:REWORDING_PREFIX] == word[:REWORDING_PREFIX] for w, _, _ in tokens(name))


def _pick(entries: list[tuple[str, str]] | None) -> tuple[str, str] | None:
    """The term a label names: a term's name comes before other terms' synonyms (entries are kept in that order)."""
    return entries[0] if entries else None


@dataclass
class TermDictionary:
    """Names and synonyms of every live term in a trie over their normalised tokens. Short labels written with
    capitals (``ER``, ``Golgi``) are kept case-sensitive so that ordinary words do not match them. Where one label
    belongs to several terms, a term's name comes before another's synonym. Words of the text also match the label
    words they inflect or derive from (``translated`` → translation, ``nuclear`` → nucleus), through the
    morphology the service uses for term search (:mod:`search.text.morphology`), learned here from the labels."""

    terms: dict[str, TermInfo]
    trie: dict[str, Any] = field(default_factory=dict)
    cased: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    #: term id -> its lower-case labels that are not acronyms (an acronym counts where the paper names the term)
    long_forms: dict[str, list[str]] = field(default_factory=dict)
    morphology: Morphology | None = None
    _forms: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def add(self, term_id: str, label: str, via: str) -> None:
        toks = tuple(t for t, _, _ in tokens(label))
        if not toks or (len(toks) == 1 and (toks[0] in _STOP or len(toks[0]) < 3)):
            return
        if _acronym(label):
            entries = self.cased.setdefault(label, [])
        else:
            if via == "synonym" and len(toks) == 1 and not _rewording(toks[0], self.terms[term_id].name):
                return
            self.long_forms.setdefault(term_id, []).append(label.lower())
            node = self.trie
            for t in toks:
                node = node.setdefault(t, {})
            entries = node.setdefault(_END, [])
        entries.append((term_id, via))
        entries.sort(key=lambda e: e[1] != "name")   # stable: a name first, else the order added (by id)

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
        return out.learn_morphology()

    @classmethod
    def build(cls, terms: Iterable[Any]) -> TermDictionary:
        """From term records (``search.core.models.Term``); obsolete terms left out."""
        out = cls(terms={})
        for t in terms:
            if not t.obsolete:
                out.extend(t.ontology, [t])
        return out.learn_morphology()

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

    def learn_morphology(self) -> TermDictionary:
        """Learn which text words stand for which label words, from the label words themselves."""
        vocab: set[str] = set()
        stack = [self.trie]
        while stack:
            node = stack.pop()
            for tok, child in node.items():
                if tok != _END:
                    vocab.add(tok)
                    stack.append(child)
        self.morphology = Morphology.learn(vocab)
        for w in vocab:
            for end in EXTRA_DERIVATIONS:
                self.morphology.forms.setdefault(w + end, []).append(w)
        self._forms.clear()
        return self

    def forms(self, token: str) -> tuple[str, ...]:
        """Label words a (normalised) text word may stand for besides itself: its alternatives and theirs."""
        got = self._forms.get(token)
        if got is None:
            alts: dict[str, None] = {}
            if self.morphology is not None:
                for a in self.morphology.alternatives(token):
                    alts[a] = None
                    alts.update(dict.fromkeys(self.morphology.alternatives(a)))
            alts.pop(token, None)
            if not token.endswith(("ed", "ing")):  # a bare noun names a thing, not the process (age, signal, bud)
                alts = {a: None for a in alts if not a.endswith("ing")}
            got = self._forms[token] = tuple(alts)
        return got

    def _longest(self, toks: list[tuple[str, int, int]], i: int) -> tuple[int, tuple[str, str]] | None:
        """The longest label starting at token ``i`` (exact words preferred over inflected ones at equal length)."""
        best: tuple[int, bool, tuple[str, str]] | None = None
        stack: list[tuple[dict[str, Any], int, bool]] = [(self.trie, i, False)]
        while stack:
            node, j, varied = stack.pop()
            entry = _pick(node.get(_END))
            if entry and j > i and (best is None or j > best[0] or (j == best[0] and best[1] and not varied)):
                best = (j, varied, entry)
            if j < len(toks):
                tok = toks[j][0]
                if tok in node:
                    stack.append((node[tok], j + 1, varied))
                stack.extend((node[a], j + 1, True) for a in self.forms(tok) if a in node)
        return None if best is None else (best[0] - i, best[2])

    def find(self, text: str, abbreviations: dict[str, str] | None = None) -> list[TermMatch]:
        """Leftmost-longest, non-overlapping matches of labels (and of the paper's own abbreviations) in ``text``."""
        toks = tokens(text)
        out: list[TermMatch] = []
        i = 0
        while i < len(toks):
            raw = text[toks[i][1]:toks[i][2]]
            hit = self._longest(toks, i)
            if hit is None and (entry := _pick(self.cased.get(raw))):
                hit = (1, entry)
            if hit is None and abbreviations and raw in abbreviations:
                hit = (1, (abbreviations[raw], "abbreviation"))
            if hit is None:
                i += 1
                continue
            n, (term_id, via) = hit
            s, e = toks[i][1], toks[i + n - 1][2]
            out.append(TermMatch(self.terms[term_id], s, e, text[s:e], via))
            i += n
        return out

    def supported(self, match: TermMatch, document: str) -> bool:
        """Whether a match stands in ``document`` (its lower-case text): an acronym from the ontology (``BAC``,
        ``TM``) only where the paper also names its term in full, since papers define the acronyms they use and
        the same letters name other things elsewhere; every other match always."""
        if match.via == "abbreviation" or not _acronym(match.text) or match.text not in self.cased:
            return True
        return any(form in document for form in self.long_forms.get(match.term.id, ()))

    def recognise(self, texts: list[str]) -> list[list[TermMatch]]:
        """The matches in each text of one paper: its own abbreviations used, acronyms checked against it."""
        abbrevs: dict[str, str] = {}
        for t in texts:
            abbrevs.update(self.abbreviations(t))
        document = "\n".join(texts).lower()
        return [[m for m in self.find(t, abbrevs) if self.supported(m, document)] for t in texts]

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
    """Term mentions in sentences that name the gene, weighted by section and distance to the gene mention (an
    acronym only in a paper that also names its term in full)."""
    units = list(units)
    texts: dict[str, list[str]] = defaultdict(list)
    for u in units:
        texts[u.pmcid].append(u.text)
    documents = {pmcid: "\n".join(ts).lower() for pmcid, ts in texts.items()}
    cands: dict[str, Candidate] = {}
    for u in units:
        for s, e in sentences(u.text):
            sent = u.text[s:e]
            genes = [m.start() for m in gene.finditer(sent)]
            if not genes:
                continue
            for tm in terms.find(sent, abbreviations.get(u.pmcid)):
                if not terms.supported(tm, documents[u.pmcid]):
                    continue
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
