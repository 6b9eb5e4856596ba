"""Morphology shared by term indexing and term queries: which label word a mention's word stands for.

A curator's mention rarely has a label's exact form: "nuclei" (nucleus), "cilia" (cilium), "testes" (testis),
"spliced" (splicing), "apoptotic" / "apoptosed" (apoptosis), "secretory" (secretion), "ciliary" (cilium). The
engine's English stemmer joins only regular endings, so these words miss their terms.

How the map is made, at index time, from the ontology's own label words (its *vocabulary*):

* **inflection** from `lemminflect <https://github.com/bjascob/LemmInflect>`_ (a maintained English lemmatiser
  with a dictionary of irregular and Latin/Greek forms, about 0.8 MB, no model download): every inflection of a
  vocabulary word, and every inflection of its lemmas ("splicing" → "splice", "spliced", "splices"), points at it;
* **Latin/Greek plurals** the dictionary lacks (mitochondrion → mitochondria, ommatidium → ommatidia): the
  classical plural endings, applied to vocabulary words only;
* **derivation** (adjective or verb ↔ process noun): the regular English derivational endings (-sis ↔ -tic,
  -poiesis ↔ -poietic, -lysis ↔ -lytic, -ion ↔ -ory / -ive / -ional / -ed / -ing, -us ↔ -ar, -um ↔ -ary,
  -y ↔ -ic, -e / -on ↔ -al), applied to vocabulary words only.

Every form is generated *from* a word the ontology uses, so the map only ever points at real label words; a form
that is itself a label word keeps its own meaning and gains the others as alternatives. Queries look words up in
the saved map: lemminflect is imported while indexing, never while searching.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from itertools import accumulate, pairwise
from typing import Any

#: classical plural endings, singular → plural (applied to vocabulary words of at least MIN_WORD letters)
LATIN_PLURALS = (("us", "i"), ("um", "a"), ("on", "a"), ("a", "ae"), ("is", "es"), ("en", "ina"), ("ex", "ices"),
                 ("ix", "ices"))
#: derivational endings, process noun → adjective / verb form
DERIVATIONS = (
    ("poiesis", "poietic"), ("genesis", "genic"), ("genesis", "genetic"), ("lysis", "lytic"), ("taxis", "tactic"),
    ("cytosis", "cytic"), ("osis", "osed"), ("sis", "tic"),
    ("ation", "ative"), ("ation", "atory"), ("ation", "ated"), ("ation", "ating"), ("ication", "ified"),
    ("ication", "ifying"), ("tion", "tory"), ("tion", "tive"), ("tion", "ted"), ("tion", "ting"), ("ion", "ional"),
    ("ion", "ory"), ("ing", "e"),
    ("us", "ar"), ("us", "ear"), ("um", "ary"), ("um", "al"), ("y", "ic"), ("e", "al"), ("on", "al"), ("", "al"),
)
MIN_WORD = 4
#: alternatives kept per surface word
MAX_ALTERNATIVES = 3


def _lemminflect_forms(word: str) -> set[str]:
    """Inflections of ``word`` and of its lemmas (lemminflect's dictionary only, no out-of-vocabulary guessing)."""
    from lemminflect import getAllInflections, getAllLemmas  # type: ignore[import-untyped]  # index time only: the import takes about a second

    lemmas = {lemma for forms in getAllLemmas(word).values() for lemma in forms}
    out = set(lemmas)
    for base in {word, *lemmas}:
        for forms in getAllInflections(base).values():
            out.update(forms)
    out.discard(word)
    return out


class Morphology:
    """Surface word → the vocabulary words it may stand for (best first).

    A loaded map stays in :meth:`state`'s sorted columns and is searched by bisection: building a dict of GO's
    ~100,000 forms cost a ``flysift terms`` call ~50 ms for the two or three words a query looks up."""

    def __init__(self, forms: dict[str, list[str]] | None = None):
        self._forms: dict[str, list[str]] | None = forms or {}
        self._keys: list[str] = []
        self._starts: list[int] = [0]
        self._words: list[str] = []

    @property
    def forms(self) -> dict[str, list[str]]:
        """The whole map (built from the columns on first use; lookups do not need it)."""
        if self._forms is None:
            self._forms = {k: self._words[self._starts[n]:self._starts[n + 1]] for n, k in enumerate(self._keys)}
        return self._forms

    @classmethod
    def learn(cls, vocabulary: Iterable[str]) -> Morphology:
        vocab = {w for w in vocabulary if w.isascii() and w.isalpha() and len(w) >= MIN_WORD}
        found: dict[str, dict[str, int]] = {}   # form → {vocabulary word: rank of the kind of link}

        def add(form: str, word: str, rank: int) -> None:
            if form != word and len(form) >= 3:
                seen = found.setdefault(form, {})
                seen[word] = min(seen.get(word, rank), rank)

        for w in sorted(vocab):
            for f in _lemminflect_forms(w):
                add(f, w, 0)
            for sing, plur in LATIN_PLURALS:
                if w.endswith(sing):
                    add(w[:len(w) - len(sing)] + plur, w, 1)
            for noun, adj in DERIVATIONS:
                if w.endswith(noun) and len(w) - len(noun) >= 3:
                    add(w[:len(w) - len(noun)] + adj, w, 2)
        forms = {f: [w for w, _ in sorted(ws.items(), key=lambda kv: (kv[1], kv[0]))][:MAX_ALTERNATIVES]
                 for f, ws in found.items()}
        return cls(forms)

    def state(self) -> dict[str, Any]:
        keys = sorted(self.forms)
        return {"forms": keys, "sizes": [len(self.forms[k]) for k in keys],
                "words": [w for k in keys for w in self.forms[k]]}

    @classmethod
    def from_state(cls, state: Any) -> Morphology:
        """The map :meth:`state` saved; ``ValueError`` when malformed (keys must be sorted and unique, as saved)."""
        try:
            keys, sizes, words = state["forms"], state["sizes"], state["words"]
        except (KeyError, TypeError):
            raise ValueError("malformed morphology") from None
        if not (isinstance(keys, list) and isinstance(sizes, list) and isinstance(words, list)) or \
                len(keys) != len(sizes) or set(map(type, sizes)) - {int} or sum(sizes) != len(words) or \
                min(sizes, default=1) < 1 or set(map(type, keys)) - {str} or set(map(type, words)) - {str} or \
                any(a >= b for a, b in pairwise(keys)):
            raise ValueError("malformed morphology")
        out = cls()
        out._forms, out._keys, out._words = None, keys, words
        out._starts = list(accumulate(sizes, initial=0))
        return out

    def alternatives(self, word: str) -> list[str]:
        if self._forms is not None:
            return self._forms.get(word, [])
        n = bisect_left(self._keys, word)
        if n < len(self._keys) and self._keys[n] == word:
            return self._words[self._starts[n]:self._starts[n + 1]]
        return []

    def variants(self, ws: list[str], limit: int = 4) -> list[list[str]]:
        """Word lists with mention words replaced by the vocabulary words they stand for: every word's first
        alternative at once, then single replacements in order."""
        found = [self.alternatives(w) for w in ws]
        alts = [(i, a) for i, a in enumerate(found) if a]
        if not alts:
            return []
        out = [[a[0] if a else w for w, a in zip(ws, found, strict=True)]]
        for i, options in alts:
            for a in options:
                out.append(ws[:i] + [a] + ws[i + 1:])
        return list({tuple(o): o for o in out if o != ws}.values())[:limit]
