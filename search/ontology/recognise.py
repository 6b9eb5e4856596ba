"""Dictionary recognition of ontology terms in text: the one home for its rules.

:class:`TermRecogniser` is a clean class over term records (``search.core.models.Term`` or anything with ``id``,
``name``, ``aspect``, ``depth``, ``synonyms`` and ``obsolete``): no HTTP, no service. The API serves it as
``POST /v1/terms/recognise`` (``search.api.terms``), which the lexical curator calls through the client; an indexer
can run it in process over every passage.

The rules, each set a priori (none is fitted to a gold standard):

* **leftmost-longest match** within a sentence, in a trie over the normalised tokens of every live term's name and
  synonyms (every scope but BROAD: a broader label names another concept); English and Latin plurals folded;
* a short label written with capitals (``CNS``, ``ER``, ``Golgi``) is matched **case-sensitively**, and an acronym the
  ontology lists counts only in a document that also names its term in full (papers define the acronyms they use);
* a document's **own abbreviations** ("endoplasmic reticulum (ER)") stand for the term they abbreviate;
* where one label belongs to several terms, the **ontology order** of the request decides first ("dendrite" is a GO
  term for the GO task and an FBbt term for expression), then a term's **name** comes before another's synonym;
* text words match the label words they **inflect or derive** from ("translated" → translation, "nuclear" →
  nucleus) through the morphology term search uses (:mod:`search.text.morphology`), learned from the label words;
  an exact reading wins over an inflected one, and a bare noun never stands for its ``-ing`` process;
* a **one-word synonym** counts only as a rewording of its term's name (the same first four letters as a name word);
* a **molecular function** is proposed only where the sentence states an activity (:func:`states_activity`): the
  word "activity" at the mention, a named binding ("DNA binding"), or an activity verb before it in its clause
  ("binds", "phosphorylates", "acts as", "encodes a"); "antibody" alone is not antigen binding.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from search.schema.terms import TermInfo
from search.text.morphology import Morphology

# ---- text units ------------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"[A-Za-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[])")
#: a bracketed short form right after a long form: "endoplasmic reticulum (ER)"
_ABBREV = re.compile(r"\(\s*([A-Za-z][A-Za-z0-9\-]{1,9})\s*[);,]")
#: English words that are also ontology labels or synonyms but in running text almost never name the concept
_STOP = frozenset("a an and as at be by for in is it of on or the to with we was were this that these".split())
#: the key under which a trie node keeps the labels that end there (never a token: tokens are non-empty)
_END = ""
#: a one-word synonym is a rewording of its term's name when it shares this many first letters with a name word
#: (apoptosis / apoptotic process, mitosis / mitotic nuclear division); otherwise it names a related concept
#: ("core" for viral nucleocapsid, "formation" for biosynthetic process). Set a priori, not fitted.
REWORDING_PREFIX = 4
#: derivational endings the shared morphology lacks, applied to label words only (cytoplasm → cytoplasmic)
EXTRA_DERIVATIONS = ("ic",)


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


#: the order of the ontologies for each curation task ("resolve per task": a label a GO and an FBbt term share is the
#: GO term for the GO task, the FBbt term for expression). Every ontology takes part, so a longer label of another
#: ontology still wins its span ("compound eye development" is a process, not an expression site); the caller keeps
#: the mentions of its task's ontologies (GO; FBbt and FBdv)
TASK_ONTOLOGIES: dict[str, tuple[str, ...]] = {"go": ("go", "fbbt", "fbdv"), "expression": ("fbbt", "fbdv", "go")}
#: the ontologies whose mentions each task uses
TASK_KEEPS: dict[str, tuple[str, ...]] = {"go": ("go",), "expression": ("fbbt", "fbdv")}


# ---- molecular function: an activity must be stated ------------------------------------------------------------------

#: verbs (and verb phrases) that state what a gene product does to what is named right after them; lower case and
#: finite forms only, so that nouns ("phosphorylation"), participles ("phosphorylated FOXO3") and names ("His-Bind")
#: are not read as statements
ACTIVITY_VERBS = re.compile(
    r"(?<![\w-])(?:binds?|bound\s+to|interacts?\s+with|cataly[sz]es|(?:de)?phosphorylates|hydroly[sz]es|cleaves|"
    r"ubiquitinates|(?:de)?acetylates|(?:de)?methylates|transports|(?:acts?|functions?|serves?)\s+as|"
    r"encodes\s+(?:a|an))\b")
#: the verb stands at most this many characters before the mention (an object follows its verb closely)
VERB_WINDOW = 40
#: where a clause starts (the verb must stand in the mention's clause)
_CLAUSE = re.compile(r"[,;:()\[\]]")
_ACTIVITY_WORD = re.compile(r"\s*[-\s]?activit(?:y|ies)\b", re.I)


def states_activity(sentence: str, start: int, end: int) -> bool:
    """Whether ``sentence[start:end]`` (a molecular function mention) stands in a statement of an activity: the word
    "activity" in it or right after it, a named binding ("DNA binding", two words or more ending in binding), or an
    activity verb shortly before it in its clause ("X binds ephrins", "X acts as a kinase", "X encodes a kinase")."""
    mention = sentence[start:end]
    words = mention.lower().split()
    if "activity" in mention.lower() or _ACTIVITY_WORD.match(sentence, end):
        return True
    if len(_TOKEN.findall(mention)) >= 2 and words and words[-1].endswith("binding"):
        return True
    if len(words) == 1 and words[0].startswith(("bind", "bound")):
        return False  # the verb itself, not what is bound
    clause_start = max((m.end() for m in _CLAUSE.finditer(sentence, 0, start)), default=0)
    window_start = max(clause_start, start - VERB_WINDOW)
    return ACTIVITY_VERBS.search(sentence, window_start, start) is not None


# ---- the recogniser --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mention:
    """A term found in a text: ``text[start:end]`` (offsets into the text given), ``via`` the kind of label matched
    (``name``, ``synonym``, ``abbreviation``), ``inflected`` when a word matched through its word form, and the
    sentence it stands in (``sentence_start``, ``sentence_end``)."""

    term: TermInfo
    start: int
    end: int
    text: str
    via: str
    inflected: bool = False
    sentence_start: int = 0
    sentence_end: int = 0


def _acronym(label: str) -> bool:
    """A short label without spaces written with capitals (``CNS``, ``ER``, ``Golgi``): matched case-sensitively."""
    return len(label) <= 5 and any(c.isupper() for c in label) and " " not in label


def _rewording(word: str, name: str) -> bool:
    return any(w[:REWORDING_PREFIX] == word[:REWORDING_PREFIX] for w, _, _ in tokens(name))


@dataclass
class Choice:
    """Which terms a recognition may report and which wins where a label has several: ``order`` ranks ontologies
    (the only ones considered; None: all, in the order they were added); ``hidden`` ids are never reported."""

    order: Sequence[str] | None = None
    hidden: Collection[str] = frozenset()
    _rank: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rank = {name: n for n, name in enumerate(self.order or ())}

    def pick(self, entries: list[tuple[str, str]] | None, terms: dict[str, TermInfo]) -> tuple[str, str] | None:
        """The entry a label names: the first ontology of ``order``, then a name before a synonym (entries are kept
        names first, then in the order added)."""
        best: tuple[int, int, tuple[str, str]] | None = None
        for n, (term_id, via) in enumerate(entries or ()):
            if term_id in self.hidden:
                continue
            ontology = terms[term_id].ontology
            if self.order is None:
                return term_id, via
            if ontology in self._rank and (best is None or (self._rank[ontology], n) < best[:2]):
                best = (self._rank[ontology], n, (term_id, via))
        return None if best is None else best[2]


ALL = Choice()


@dataclass
class TermRecogniser:
    """Names and synonyms of every live term in a trie over their normalised tokens (see the module docstring)."""

    terms: dict[str, TermInfo] = field(default_factory=dict)
    trie: dict[str, Any] = field(default_factory=dict)
    cased: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    #: term id -> its lower-case labels that are not acronyms (an acronym counts where the paper names the term)
    long_forms: dict[str, list[str]] = field(default_factory=dict)
    morphology: Morphology | None = None
    _forms: dict[str, tuple[str, ...]] = field(default_factory=dict)

    # ---- building -------------------------------------------------------------------------------------------------
    @classmethod
    def build(cls, terms: Iterable[Any]) -> TermRecogniser:
        """From term records (``search.core.models.Term``, which carry their ontology); obsolete terms left out."""
        out = cls()
        for t in terms:
            if not t.obsolete:
                out.extend(t.ontology, [t])
        return out.learn_morphology()

    def extend(self, ontology: str, records: Iterable[Any]) -> None:
        """Add live term records of ``ontology``: names and synonyms of every scope but BROAD. Call
        :meth:`learn_morphology` once after the last ``extend``."""
        for t in records:
            if t.id in self.terms:
                continue
            self.terms[t.id] = TermInfo(t.id, ontology, t.name, t.aspect, t.depth)
            self.add(t.id, t.name, "name")
            for syn in t.synonyms:
                if syn.scope != "BROAD":
                    self.add(t.id, syn.text, "synonym")

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
        entries.sort(key=lambda e: e[1] != "name")   # stable: a name first, else the order added

    def learn_morphology(self) -> TermRecogniser:
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

    @property
    def ontologies(self) -> list[str]:
        return list(dict.fromkeys(t.ontology for t in self.terms.values()))

    # ---- matching -------------------------------------------------------------------------------------------------
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

    def _longest(self, toks: list[tuple[str, int, int]], i: int, choice: Choice
                 ) -> tuple[int, bool, tuple[str, str]] | None:
        """The longest label starting at token ``i`` (exact words preferred over inflected ones at equal length):
        (tokens, inflected, entry)."""
        best: tuple[int, bool, tuple[str, str]] | None = None
        stack: list[tuple[dict[str, Any], int, bool]] = [(self.trie, i, False)]
        while stack:
            node, j, varied = stack.pop()
            entry = choice.pick(node.get(_END), self.terms)
            if entry and j > i and (best is None or j > best[0] or (j == best[0] and best[1] and not varied)):
                best = (j, varied, entry)
            if j < len(toks):
                tok = toks[j][0]
                if tok in node:
                    stack.append((node[tok], j + 1, varied))
                stack.extend((node[a], j + 1, True) for a in self.forms(tok) if a in node)
        return None if best is None else (best[0] - i, best[1], best[2])

    def find(self, text: str, abbreviations: dict[str, str] | None = None, choice: Choice = ALL) -> list[Mention]:
        """Leftmost-longest, non-overlapping matches of labels (and of the document's own abbreviations) in
        ``text``, taken as one stretch (:meth:`recognise` runs it sentence by sentence)."""
        toks = tokens(text)
        out: list[Mention] = []
        i = 0
        while i < len(toks):
            raw = text[toks[i][1]:toks[i][2]]
            hit = self._longest(toks, i, choice)
            if hit is None and (entry := choice.pick(self.cased.get(raw), self.terms)):
                hit = (1, False, entry)
            if hit is None and abbreviations and raw in abbreviations and \
                    choice.pick([(abbreviations[raw], "abbreviation")], self.terms):
                hit = (1, False, (abbreviations[raw], "abbreviation"))
            if hit is None:
                i += 1
                continue
            n, inflected, (term_id, via) = hit
            s, e = toks[i][1], toks[i + n - 1][2]
            out.append(Mention(self.terms[term_id], s, e, text[s:e], via, inflected, 0, len(text)))
            i += n
        return out

    def supported(self, mention: Mention, document: str) -> bool:
        """Whether a match stands in ``document`` (its lower-case text): an acronym from the ontology (``BAC``,
        ``TM``) only where the document also names its term in full; every other match always."""
        if mention.via == "abbreviation" or not _acronym(mention.text) or mention.text not in self.cased:
            return True
        return any(form in document for form in self.long_forms.get(mention.term.id, ()))

    def abbreviations(self, text: str, choice: Choice = ALL) -> dict[str, str]:
        """Short forms the text defines for a recognised term: "endoplasmic reticulum (ER)" makes ER mean it."""
        out: dict[str, str] = {}
        for m in _ABBREV.finditer(text):
            before = text[max(0, m.start() - 200):m.start()].rstrip()
            matches = self.find(before, choice=choice)
            if matches and matches[-1].end == len(before):
                short = m.group(1)
                initials = "".join(w[0] for w in re.findall(r"[A-Za-z0-9]+", matches[-1].text)).lower()
                if short.lower()[0] == initials[0]:
                    out[short] = matches[-1].term.id
        return out

    def recognise(self, texts: Sequence[str], ontologies: Sequence[str] | None = None,
                  hidden: Collection[str] = frozenset(), activity_rule: bool = True) -> list[list[Mention]]:
        """The mentions in each text of one document (its paragraphs), sentence by sentence: the document's own
        abbreviations used, ontology acronyms checked against it. ``ontologies`` are the ones to report, in the
        order that decides between same-named terms (None: all); ``hidden`` ids are never reported;
        ``activity_rule`` keeps a molecular function only where its sentence states an activity."""
        choice = Choice(list(ontologies) if ontologies is not None else None, hidden)
        abbrevs: dict[str, str] = {}
        for t in texts:
            abbrevs.update(self.abbreviations(t, choice))
        document = "\n".join(texts).lower()
        out = []
        for t in texts:
            found = []
            for s, e in sentences(t):
                sentence = t[s:e]
                for m in self.find(sentence, abbrevs, choice):
                    if not self.supported(m, document):
                        continue
                    if activity_rule and m.term.ontology == "go" and m.term.aspect == "F" and \
                            not states_activity(sentence, m.start, m.end):
                        continue
                    found.append(Mention(m.term, s + m.start, s + m.end, m.text, m.via, m.inflected, s, e))
            out.append(found)
        return out
