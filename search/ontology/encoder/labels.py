"""What an ontology gives the term encoder: its live terms' labels (the name and each distinct synonym) as one
table, the digest that ties label vectors to this version of those labels, and the seeded term-level split.

A label is ``(term number, k)``: k 0 is the term's name, k ≥ 1 its k-th synonym as the ontology lists it (so the
service can report the synonym matched). A synonym whose normalised text equals the name's or an earlier
synonym's is left out: its vector would be the same.

The split is by term, drawn from a hash of ``(split seed, ontology, term id)``: a term is in ``test`` (the
held-out terms the benchmark scores), ``dev`` (held out too, for choosing the fusion weight and the epochs) or
``train``, independently of every other term and of the ontology's release, so a new release keeps each term
where it was. Held-out terms are withheld from training entirely (their names and synonyms are neither anchors,
positives nor negatives) and from nothing else: they are embedded and served like every other term.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from search.ontology.encoder.config import DEV_FRACTION, TEST_FRACTION
from search.ontology.model import IS_A, Ontology

ASPECT_CODES = {"biological_process": "P", "molecular_function": "F", "cellular_component": "C"}
SPLITS = ("train", "dev", "test")


def clean(text: str) -> str:
    """A label as embedded: its whitespace collapsed."""
    return " ".join(text.split())


def _key(text: str) -> str:
    return clean(text).casefold()


@dataclass
class LabelTable:
    """One ontology's live terms and their labels, in the ontology's order."""

    ontology: str
    data_version: str | None
    ids: list[str]
    aspects: str                       # one character per term: P, F, C or -
    texts: list[str]                   # per label
    term: list[int]                    # per label: its term number (into ids)
    k: list[int]                       # per label: 0 the name, k the k-th synonym
    parents: list[list[int]] = field(default_factory=list)   # per term: its is_a parents among the live terms
    definitions: list[str] = field(default_factory=list)     # per term ("" for none); not labels, not in the digest

    @classmethod
    def of(cls, ontology: Ontology, hierarchy: bool = False) -> LabelTable:
        """The table of ``ontology``; with ``hierarchy`` also each term's is_a parents (training's siblings)."""
        cols = ontology.columns
        ids: list[str] = []
        aspects: list[str] = []
        texts: list[str] = []
        term: list[int] = []
        ks: list[int] = []
        defs: list[str] = []
        for i, tid in enumerate(cols["ids"]):
            if cols["obsolete"][i]:
                continue
            t = len(ids)
            ids.append(tid)
            defs.append(clean(cols["defs"][i] or ""))
            aspects.append(ASPECT_CODES.get(cols["namespaces"][i] or "", "-"))
            name = clean(cols["names"][i])
            seen = {_key(name)}
            texts.append(name)
            term.append(t)
            ks.append(0)
            for k, (text, _scope) in enumerate(cols["synonyms"][i], start=1):
                text = clean(text)
                if text and _key(text) not in seen:
                    seen.add(_key(text))
                    texts.append(text)
                    term.append(t)
                    ks.append(k)
        parents: list[list[int]] = []
        if hierarchy:
            number = {tid: n for n, tid in enumerate(ids)}
            parents = [[number[p] for p in ontology.parents(tid, (IS_A,)) if p in number] for tid in ids]
        return cls(ontology.name, ontology.data_version, ids, "".join(aspects), texts, term, ks, parents, defs)

    @cached_property
    def digest(self) -> str:
        """What the label vectors depend on: equal digests, equal rows. The service compares the served ontology's
        digest with the one the artefact's vectors were made from."""
        h = hashlib.sha256(f"{self.ontology}\x00{len(self.ids)}\x00{len(self.texts)}\x00".encode())
        for tid, aspect in zip(self.ids, self.aspects, strict=True):
            h.update(f"{tid}\x01{aspect}\x02".encode())
        for text, t, k in zip(self.texts, self.term, self.k, strict=True):
            h.update(f"{t}\x01{k}\x01{text}\x03".encode())
        return h.hexdigest()[:32]

    @cached_property
    def labels_of(self) -> list[list[int]]:
        """Per term, its label rows (the name's first)."""
        out: list[list[int]] = [[] for _ in self.ids]
        for row, t in enumerate(self.term):
            out[t].append(row)
        return out

    @cached_property
    def children(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.ids]
        for child, ps in enumerate(self.parents):   # empty unless made with ``hierarchy``
            for p in ps:
                out[p].append(child)
        return out

    def siblings(self, t: int) -> Iterator[int]:
        """Terms sharing an is_a parent with term ``t`` (not ``t``), parent by parent."""
        for p in self.parents[t]:
            for c in self.children[p]:
                if c != t:
                    yield c

    def synonym_rows(self, t: int) -> list[int]:
        return self.labels_of[t][1:]


def split_of(seed: int, ontology: str, term_id: str, test: float = TEST_FRACTION, dev: float = DEV_FRACTION) -> str:
    """``train``, ``dev`` or ``test`` for one term: a uniform draw from a hash of the seed, the ontology's name and
    the id (stable across releases and processes)."""
    h = hashlib.blake2b(f"{seed}\x00{ontology}\x00{term_id}".encode(), digest_size=8).digest()
    u = int.from_bytes(h, "big") / 2.0 ** 64
    return "test" if u < test else "dev" if u < test + dev else "train"


def split(table: LabelTable, seed: int, test: float = TEST_FRACTION, dev: float = DEV_FRACTION) -> list[str]:
    """Per term of ``table``, its split."""
    return [split_of(seed, table.ontology, tid, test, dev) for tid in table.ids]
