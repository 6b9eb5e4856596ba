"""What the term re-ranker learns from one ontology, and its file format.

Learned at indexing (:meth:`RerankModel.learn`, about a minute for GO) from the ontology as served, so a benchmark
that holds synonyms out of the index also holds them out of here:

* IDF weights of word-view stems over the terms' labels (names and synonyms);
* rewrite rules learned from the ontology's own name/synonym pairs: where a synonym and its term's name differ in
  one stretch of words ("IL-21 production" / "interleukin-21 production", "T lymphocyte" / "T cell", "formation" /
  "biosynthetic process", "localisation in" / "localization to"), that stretch is a rule, counted; every multi-word
  synonym is a rule too;
* the morphology of the label words (``search.text.morphology``), the initials of the names' word runs (for
  abbreviations) and, per term, what ranks it: label stems and scopes, definition stems, generality, synonym texts.

Saved beside the ontology as ``<data_dir>/ontologies/<name>.rerank.npz``: numbers and UTF-8 only, read back by
:func:`_map_npz` (a memory map; nothing is unpickled) and checked column by column (:meth:`RerankModel.load`), so a
planted file can at worst mis-rank. The model is the :class:`search.ontology.rewrites.Vocabulary` the query rewrites
read; the re-ranker (``search.ontology.rerank``) scores with its :class:`Columns`.
"""

from __future__ import annotations

import io
import json
import math
import mmap
import operator
import os
import struct
import tempfile
import zipfile
from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from search.ontology.model import Ontology
from search.ontology.rewrites import (
    ABBREV_MAX,
    conventional_words,
    initial_sequences,
    stem_list,
    stems,
    words,
)
from search.text.analysis import stem
from search.text.morphology import Morphology
from search.text.spelling import Speller

#: a rule must have been seen this often, and be this share of its left side's uses
RULE_MIN_COUNT = 2
RULE_MIN_SHARE = 0.15
#: words in more than this share of terms' labels (and at least RULE_STOP_MIN: "of", "to", "cell") are not a
#: rule's whole left side
RULE_STOP_DF = 0.04
RULE_STOP_MIN = 20
#: the longest synonym (in words) that rewrites to its term's name inside a query
PHRASE_MAX = 6
#: stems that make the regulation frame of a GO label: "regulation of X" ≠ "positive regulation of X" ≠ X
FRAME = ("regul", "posit", "negat")
#: the label words of one term: its name's words as written and each synonym's
RawLabels = tuple[list[str], list[list[str]]]
Rules = dict[tuple[str, ...], list[tuple[tuple[str, ...], int]]]


def frame(tokens: frozenset[str]) -> tuple[bool, ...]:
    """A label's (or a query form's) regulation frame: which of ``FRAME`` its stems hold."""
    return tuple(f in tokens for f in FRAME)


def _segment_diff(a: list[str], b: list[str]) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """Where and in which stretches word lists ``a`` and ``b`` differ, after their common (stem-equal) head and
    tail."""
    sa, sb = [stem(w) for w in a], [stem(w) for w in b]
    n = min(len(a), len(b))
    p = 0
    while p < n and sa[p] == sb[p]:
        p += 1
    q = 0
    while q < n - p and sa[-1 - q] == sb[-1 - q]:
        q += 1
    return p, tuple(a[p:len(a) - q]), tuple(b[p:len(b) - q])




_SPACES = operator.methodcaller("count", " ")


def _map_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an uncompressed ``.npz`` as read-only views of one memory map of the file.

    ``np.load`` copies every member through zipfile's reader and checks its CRC (~35 ms for GO's 28 MB model, most of
    a ``flysift terms`` call's load); mapped, pages are read as the arrays are touched. Only plain numeric and byte
    dtypes are accepted (nothing is unpickled), and every member must lie inside the file: ``ValueError`` otherwise."""
    with open(path, "rb") as fh, zipfile.ZipFile(fh) as zf:
        infos = zf.infolist()
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    out: dict[str, np.ndarray] = {}
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
            raise ValueError(f"member {info.filename[:40]!r}: not a stored .npy")
        at = info.header_offset
        if mm[at:at + 4] != b"PK\x03\x04":
            raise ValueError("bad local header")
        name_len, extra_len = struct.unpack("<HH", mm[at + 26:at + 30])
        start = at + 30 + name_len + extra_len
        end = start + info.file_size
        if end > len(mm):
            raise ValueError("member past the end of the file")
        header = io.BytesIO(mm[start:min(end, start + 65536)])
        try:   # numpy parses the header with a literal evaluator: a planted one fails in several ways
            version = np.lib.format.read_magic(header)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                           (2, 0): np.lib.format.read_array_header_2_0}[version]
            shape, fortran, dtype = read_header(header)
        except Exception as e:
            raise ValueError(f"member {info.filename[:40]!r}: bad .npy header ({type(e).__name__})") from None
        if dtype.hasobject or dtype.kind not in "iuf" or fortran or len(shape) != 1:
            raise ValueError(f"member {info.filename[:40]!r}: dtype {dtype.str} shape {shape}")
        data = start + header.tell()
        if data + shape[0] * dtype.itemsize > end:
            raise ValueError(f"member {info.filename[:40]!r}: shorter than its header says")
        out[info.filename[:-4]] = np.frombuffer(mm, dtype=dtype, count=shape[0], offset=data)
    return out


def _positions_of(key: str) -> cached_property[dict[str, int]]:
    """A model attribute: string → position in the meta list ``key``, made on first use."""
    def positions(self: RerankModel) -> dict[str, int]:
        return dict(zip(self.meta[key], range(len(self.meta[key])), strict=True))
    return cached_property(positions)


def _starts_of(column: str) -> cached_property[list[int]]:
    """A model attribute: where each value of the sizes ``column`` starts (one cumulative sum, made on first use)."""
    def starts(self: RerankModel) -> list[int]:
        return np.concatenate(([0], np.cumsum(self.arrays[column], dtype=np.int64))).tolist()
    return cached_property(starts)


class _Labels(NamedTuple):
    """The labels of every term as :func:`_read_labels` found them."""

    stems: list[list[frozenset[str]]]   # per term: its labels' stems, the name first
    df: Counter[str]                     # stem → terms whose labels hold it
    pairs: Counter[tuple[tuple[str, ...], tuple[str, ...]]]   # (synonym stretch, name stretch) → times seen
    raw: list[RawLabels]                 # per term: label words before GO's naming conventions


def _read_labels(names: list[str], synonyms: list[list[tuple[str, str]]]) -> _Labels:
    """Each term's label stems (after GO's naming conventions), the stems' document frequencies, and the stretches
    where a synonym differs from its term's name (with the word before, for rules whose left side alone is too
    common: "to")."""
    out = _Labels([], Counter(), Counter(), [])
    for name, syns in zip(names, synonyms, strict=True):
        name_raw = words(name)
        nw = conventional_words(name, name_raw)
        labels = [stems(nw)]
        syns_raw = []
        for text, _scope in syns:
            sw_raw = words(text)
            syns_raw.append(sw_raw)
            sw = conventional_words(text, sw_raw)
            labels.append(stems(sw))
            p, lhs, rhs = _segment_diff(sw, nw)
            if 1 <= len(lhs) <= 3 and 1 <= len(rhs) <= 4:
                out.pairs[lhs, rhs] += 1
                if p:
                    out.pairs[(sw[p - 1], *lhs), (sw[p - 1], *rhs)] += 1
        out.raw.append((name_raw, syns_raw))
        out.stems.append(labels)
        out.df.update(frozenset().union(*labels))
    return out


def _learn_rules(pairs: Counter[tuple[tuple[str, ...], tuple[str, ...]]], df: Counter[str], n: int) -> Rules:
    """The stretches seen often enough (``RULE_MIN_COUNT``, ``RULE_MIN_SHARE`` of their left side's uses) whose left
    side is not only common words, most frequent first."""
    uses: Counter[tuple[str, ...]] = Counter()
    for (lhs, _), c in pairs.items():
        uses[lhs] += c
    stop = {t for t, c in df.items() if c > max(RULE_STOP_DF * n, RULE_STOP_MIN)}
    rules: Rules = {}
    for (lhs, rhs), c in sorted(pairs.items(), key=lambda kv: -kv[1]):
        if c >= RULE_MIN_COUNT and c >= RULE_MIN_SHARE * uses[lhs] and not stems(lhs) <= stop | {""}:
            rules.setdefault(lhs, []).append((rhs, c))
    return rules


def _add_synonym_phrases(rules: Rules, raw: list[RawLabels], df: Counter[str], n: int) -> None:
    """Every multi-word synonym, and every synonym of one rare word, names its term inside longer labels: "Rad50
    complex assembly" is "Mre11 complex assembly" because "Rad50 complex" is a synonym of "Mre11 complex" (count 0: a
    synonym phrase, not a learned rule; at most two right sides each)."""
    rare = RULE_STOP_DF * n / 10
    for nw, syns_raw in raw:
        for phrase in map(tuple, syns_raw):
            if 1 <= len(phrase) <= PHRASE_MAX and (len(phrase) > 1 or df.get(stem(phrase[0]), 0) <= rare) and \
                    stems(phrase) != stems(nw):
                known = rules.setdefault(phrase, [])
                if len(known) < 2 and all(r != tuple(nw) for r, _ in known):
                    known.append((tuple(nw), 0))


def _initials(names_words: list[list[str]]) -> dict[str, list[int]]:
    """Initials of 2–4 consecutive name words (function words skipped or not) → the rows of the names with them,
    for abbreviations ("vDR" → "ventral double row")."""
    initials: dict[str, list[int]] = {}
    for i, nw in enumerate(names_words):
        for seq in initial_sequences(nw):
            letters = [w[0] if w[0].isalpha() else "" for w in seq]
            for j in range(len(seq)):
                for k in range(2, ABBREV_MAX + 1):
                    window = letters[j:j + k]
                    if len(window) == k and all(window):
                        rows = initials.setdefault("".join(window), [])
                        if not rows or rows[-1] != i:
                            rows.append(i)
    return initials


def _columns(ont: Ontology, labels_of: list[list[frozenset[str]]], idf: dict[str, float], unknown_idf: float,
             defs: list[str | None], synonyms: list[list[tuple[str, str]]], names_words: list[list[str]],
             rules: Rules, scopes: tuple[str, ...]) -> tuple[dict[str, np.ndarray], list[str]]:
    """The model's numeric columns (all but the initials) and its vocabulary: label stems, definition stems and name
    words as numbers into one vocabulary, coded in that order (they load as shared strings)."""
    vocab: dict[str, int] = {}
    code = lambda w: vocab.setdefault(w, len(vocab))  # noqa: E731
    label_codes = [[code(t) for t in sorted(lab)] for labs in labels_of for lab in labs]
    # fsum: a label's stems are a set, whose order changes with the process's hash seed; a plain sum's last bit
    # followed it, and two labels of equal weight ranked in another order after a restart
    weights = [math.fsum(idf.get(t, unknown_idf) for t in lab) for labs in labels_of for lab in labs]
    def_codes = [[code(t) for t in dict.fromkeys(stem_list(words(text or "")))] for text in defs]
    word_codes = [code(w) for ws in names_words for w in ws]
    syn_text = "".join(text + "\x00" for syns in synonyms for text, _ in syns).encode()
    syn_lens = [len(text.encode()) + 1 for syns in synonyms for text, _ in syns]
    scope_code = {s: k for k, s in enumerate(scopes)}
    keys = list(rules)
    ints = lambda xs: np.asarray(xs, dtype=np.int32)  # noqa: E731
    arrays: dict[str, np.ndarray] = {
        "labels": ints([len(labs) for labs in labels_of]), "sizes": ints([len(c) for c in label_codes]),
        "stems": ints([t for c in label_codes for t in c]), "weights": np.asarray(weights, dtype=np.float64),
        "scopes": np.asarray([0 if k == 0 else scope_code.get(syns[k - 1][1], len(scopes) - 1)
                              for syns, labs in zip(synonyms, labels_of, strict=True)
                              for k in range(len(labs))], dtype=np.int8),
        "name_words": ints([len(ws) for ws in names_words]), "words": ints(word_codes),
        "rule_sizes": ints([len(rules[k]) for k in keys]),
        "rhs_counts": np.asarray([c for k in keys for _, c in rules[k]], dtype=np.int64),
        "def_sizes": ints([len(c) for c in def_codes]), "def_stems": ints([t for c in def_codes for t in c]),
        "generality": np.asarray([math.log1p(len(ont.descendants(t, "hierarchy"))) / math.log1p(max(1, len(ont)))
                                  for t in ont.ids], dtype=np.float64),
        "syn_text": np.frombuffer(syn_text, dtype=np.uint8),
        "syn_ends": np.cumsum(np.asarray(syn_lens, dtype=np.int64), dtype=np.int64),
    }
    return arrays, list(vocab)


class RerankModel:
    """What the re-ranker learns from one ontology: label stems, IDF weights, rewrite rules, and per term what ranks it
    (definition stems, generality, synonym scopes and texts).

    It is held as flat columns (:attr:`arrays`, numpy, and :attr:`meta`, plain lists and dicts), the same whether
    learned (:meth:`learn`) or read back (:meth:`load`: milliseconds, where learning GO takes a minute), so a search
    needs neither the ontology nor its OBO file. A term's labels, definition and name words are made from the columns
    the first time it is a candidate (most terms never are)."""

    #: the layout of :meth:`save`; a saved model of another format is learned again
    FORMAT = 6   # 6: abbreviation initials also skip function words ("AMMC")
    #: scope codes of the ``scopes`` column (0: the name)
    SCOPES = ("", "EXACT", "NARROW", "BROAD", "RELATED")
    #: array → dtype kind and what its length is (a key of :meth:`_lengths`); ``load`` checks both
    ARRAYS: dict[str, tuple[str, str]] = {
        "labels": ("i", "terms"), "sizes": ("i", "labels"), "stems": ("i", "stems"), "weights": ("f", "labels"),
        "scopes": ("i", "labels"), "name_words": ("i", "terms"), "words": ("i", "words"), "rule_sizes": ("i", "rules"),
        "rhs_counts": ("i", "rhs"), "initial_sizes": ("i", "initials"), "initial_rows": ("i", "initial_rows"),
        "def_sizes": ("i", "terms"), "def_stems": ("i", "def_stems"), "generality": ("f", "terms"),
        "syn_text": ("u", "syn_bytes"), "syn_ends": ("i", "synonyms"),
    }

    def __init__(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]):
        """From columns :meth:`learn` made or :meth:`load` checked."""
        self.meta, self.arrays = meta, arrays
        self.ids: list[str] = meta["ids"]
        self.vocab: list[str] = meta["vocab"]
        self.idf: dict[str, float] = meta["idf"]
        self.unknown_idf = float(meta["unknown_idf"])
        self.has_aspects = bool(meta["has_aspects"])
        self.morph = Morphology.from_state(meta["morphology"])
        # the lookup tables below are made on first use: a ``flysift terms`` call loads the model for one query, and
        # building all of them took ~50 ms of its time (abbreviations and definitions are rarely needed)

        self._terms: dict[int, list[tuple[frozenset[str], float, str, tuple[bool, ...]]]] = {}
        self._def_stems: dict[int, frozenset[str]] = {}

    @cached_property
    def index(self) -> dict[str, int]:
        """Term id → row."""
        return dict(zip(self.ids, range(len(self.ids)), strict=True))

    _rule_at = _positions_of("rules")
    _initial_at = _positions_of("initials")

    @cached_property
    def speller(self) -> Speller:
        """Corrections of misspelt query words among the terms' name words, commoner stems first (made on the first
        query with a word no label uses)."""
        return Speller((self.vocab[c] for c in set(self.arrays["words"].tolist())),
                       lambda w: -self.idf.get(stem(w), self.unknown_idf))

    @cached_property
    def max_lhs(self) -> int:
        """The most words a rule's left side has."""
        return max(map(_SPACES, self.meta["rules"]), default=-1) + 1

    # where each term's, label's, rule's and initial's values start
    _label_at = _starts_of("labels")
    _stem_at = _starts_of("sizes")
    _word_at = _starts_of("name_words")
    _def_at = _starts_of("def_sizes")
    _rhs_at = _starts_of("rule_sizes")
    _row_at = _starts_of("initial_sizes")

    @cached_property
    def _syn_at(self) -> list[int]:
        return [0, *self.arrays["syn_ends"].tolist()]

    @cached_property
    def _generality(self) -> list[float]:
        return self.arrays["generality"].tolist()

    # ---- learning -------------------------------------------------------------------------------------------------
    @classmethod
    def learn(cls, ont: Ontology) -> RerankModel:
        """Learn the model from the ontology's columns (building Term models for every term would take longer)."""
        d = ont.columns
        labels = _read_labels(d["names"], d["synonyms"])
        n = max(1, len(d["names"]))
        idf = {t: math.log(1 + n / c) for t, c in labels.df.items()}
        rules = _learn_rules(labels.pairs, labels.df, n)
        _add_synonym_phrases(rules, labels.raw, labels.df, n)
        morph = Morphology.learn(w for nw, syns_raw in labels.raw for ws in (nw, *syns_raw) for w in ws)
        names_words = [words(name) for name in d["names"]]
        arrays, vocab = _columns(ont, labels.stems, idf, math.log(1 + n), d["defs"], d["synonyms"], names_words,
                                 rules, cls.SCOPES)
        initials = _initials(names_words)
        ints = lambda xs: np.asarray(xs, dtype=np.int32)  # noqa: E731
        arrays |= {"initial_sizes": ints([len(v) for v in initials.values()]),
                   "initial_rows": ints([i for v in initials.values() for i in v])}
        keys = list(rules)
        meta = {"format": cls.FORMAT, "terms": len(ont), "ids": list(ont.ids), "has_aspects": ont.has_aspects,
                "vocab": vocab, "idf": idf, "unknown_idf": math.log(1 + n), "rules": [" ".join(k) for k in keys],
                "rhs": [" ".join(r) for k in keys for r, _ in rules[k]], "initials": list(initials),
                "morphology": morph.state()}
        return cls(meta, {k: arrays[k] for k in cls.ARRAYS})

    # ---- the saved form -------------------------------------------------------------------------------------------
    #: string lists saved as newline-terminated UTF-8 columns instead of inside the JSON ``meta``: parsing them as
    #: JSON was ~40 ms of every ``flysift terms`` call; a split is a few (meta key, key inside it or "") → column
    TEXT_COLUMNS: dict[str, tuple[str, str]] = {
        "text_ids": ("ids", ""), "text_vocab": ("vocab", ""), "text_rules": ("rules", ""), "text_rhs": ("rhs", ""),
        "text_initials": ("initials", ""), "text_morph_forms": ("morphology", "forms"),
        "text_morph_words": ("morphology", "words"),
    }

    def save(self, path: Path) -> None:
        """One uncompressed ``.npz`` (numbers and UTF-8 bytes only: it loads with ``allow_pickle=False``): the string
        lists as text columns, the rest of the lists and dicts as a JSON document in its ``meta`` array; written
        atomically."""
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = dict(self.meta)
        texts: dict[str, np.ndarray] = {}
        for column, (key, sub) in self.TEXT_COLUMNS.items():
            holder = meta if not sub else dict(meta[key])
            items = holder[sub or key]
            if isinstance(items, list) and all(isinstance(t, str) and "\n" not in t for t in items):   # else JSON
                texts[column] = np.frombuffer("".join(t + "\n" for t in items).encode(), np.uint8)
                holder[sub or key] = None
            if sub:
                meta[key] = holder
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            raw = np.frombuffer(json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode(), np.uint8)
            savez: Any = np.savez   # numpy's stub reads **arrays as its keyword options
            with os.fdopen(fd, "wb") as fh:
                savez(fh, meta=raw, **texts, **self.arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: Path) -> RerankModel:
        """What :meth:`save` wrote; ``ValueError`` for anything else. Every column's type and length and every index
        are checked, so a planted file can at worst mis-rank, never fail a search or run code."""
        try:
            got = _map_npz(path)
            meta = json.loads(got.pop("meta").tobytes())
            if isinstance(meta, dict) and meta.get("format") == cls.FORMAT:
                for column, (key, sub) in cls.TEXT_COLUMNS.items():
                    if column in got:
                        a = got.pop(column)
                        if a.dtype != np.uint8 or a.ndim != 1:
                            raise ValueError(column)
                        holder = meta[key] if sub else meta
                        if not isinstance(holder, dict) or holder.get(sub or key, 0) is not None:
                            raise ValueError(column)
                        holder[sub or key] = a.tobytes().decode().split("\n")[:-1]
        except (OSError, EOFError, KeyError, ValueError, RecursionError, zipfile.BadZipFile, struct.error) as e:
            raise ValueError(f"{path.name}: not a re-ranker model ({type(e).__name__})") from None
        if not isinstance(meta, dict) or meta.get("format") != cls.FORMAT:
            raise ValueError(f"{path.name}: not a re-ranker model of format {cls.FORMAT}")
        try:
            cls._check(meta, got)
            return cls(meta, got)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise ValueError(f"{path.name}: malformed re-ranker model ({type(e).__name__}: {str(e)[:100]})") from None

    @classmethod
    def _check(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        lists = ("ids", "vocab", "rules", "rhs", "initials")
        if not all(isinstance(meta[k], list) and set(map(type, meta[k])) <= {str} for k in lists) or \
                not isinstance(meta["idf"], dict) or set(arrays) != set(cls.ARRAYS) or \
                not set(map(type, meta["idf"].values())) <= {float} or \
                not isinstance(meta["unknown_idf"], float) or len(meta["ids"]) != meta["terms"]:
            raise ValueError("columns of the wrong type")
        for k, (kind, _) in cls.ARRAYS.items():
            a = arrays[k]
            if a.ndim != 1 or a.dtype.kind != kind or (kind == "i" and a.size and a.min() < 0):
                raise ValueError(f"column {k}")
        total = lambda k: int(arrays[k].sum(dtype=np.int64))  # noqa: E731
        lengths = {"terms": meta["terms"], "labels": total("labels"), "stems": total("sizes"),
                   "words": total("name_words"), "rules": len(meta["rules"]), "rhs": len(meta["rhs"]),
                   "initials": len(meta["initials"]), "initial_rows": total("initial_sizes"),
                   "def_stems": total("def_sizes"), "synonyms": total("labels") - meta["terms"],
                   "syn_bytes": int(arrays["syn_ends"][-1]) if arrays["syn_ends"].size else 0}
        if any(arrays[k].size != lengths[n] for k, (_, n) in cls.ARRAYS.items()) or \
                total("rule_sizes") != len(meta["rhs"]) or arrays["labels"].min(initial=1) < 1:
            raise ValueError("column lengths do not add up")
        bounds = {"stems": len(meta["vocab"]), "words": len(meta["vocab"]), "def_stems": len(meta["vocab"]),
                  "initial_rows": meta["terms"], "scopes": len(cls.SCOPES)}
        if any(arrays[k].size and arrays[k].max() >= n for k, n in bounds.items()) or \
                np.any(np.diff(arrays["syn_ends"]) < 1):
            raise ValueError("an index out of range")

    @cached_property
    def columns(self) -> Columns:
        """The columns :func:`rerank` scores with, as numpy arrays (made on the first search, in milliseconds)."""
        return Columns(self)

    # ---- per term, made when first needed --------------------------------------------------------------------------
    def term(self, i: int) -> list[tuple[frozenset[str], float, str, tuple[bool, ...]]]:
        """Term ``i``'s labels (the name, then its synonyms): stems, IDF weight, scope ("" for the name), frame."""
        got = self._terms.get(i)
        if got is None:
            a, vocab, at = self.arrays, self.vocab, self._stem_at
            first, end = self._label_at[i], self._label_at[i + 1]
            codes = a["stems"][at[first]:at[end]].tolist()   # one slice per term: numpy slicing is slow per label
            got = []
            for k, weight, scope in zip(range(first, end), a["weights"][first:end].tolist(),
                                        a["scopes"][first:end].tolist(), strict=True):
                lab = frozenset([vocab[t] for t in codes[at[k] - at[first]:at[k + 1] - at[first]]])
                got.append((lab, weight, self.SCOPES[scope], frame(lab)))
            self._terms[i] = got
        return got

    def synonym(self, i: int, k: int) -> str:
        """The text of term ``i``'s ``k``-th synonym (0-based)."""
        n = self._label_at[i] - i + k   # each term has one name label before its synonyms
        return self.arrays["syn_text"][self._syn_at[n]:self._syn_at[n + 1] - 1].tobytes().decode()

    def definition(self, i: int) -> frozenset[str]:
        """Stems of term ``i``'s definition."""
        got = self._def_stems.get(i)
        if got is None:
            codes = self.arrays["def_stems"][self._def_at[i]:self._def_at[i + 1]].tolist()
            got = self._def_stems[i] = frozenset([self.vocab[t] for t in codes])
        return got

    def generality(self, i: int) -> float:
        """How general term ``i`` is: log(1 + its descendants over the hierarchy) / log(1 + terms)."""
        return self._generality[i] if 0 <= i < len(self._generality) else 0.0

    def name_words(self, i: int) -> list[str]:
        return [self.vocab[t] for t in self.arrays["words"][self._word_at[i]:self._word_at[i + 1]].tolist()]

    # ---- what the query rewrites read (search.ontology.rewrites.Vocabulary) ------------------------------------------
    def rule(self, lhs: tuple[str, ...] | list[str]) -> list[tuple[tuple[str, ...], int]]:
        """The right sides a left side rewrites to, most frequent first (count 0: a synonym phrase)."""
        n = self._rule_at.get(" ".join(lhs))
        if n is None:
            return []
        rhs, counts = self.meta["rhs"], self.arrays["rhs_counts"]
        return [(tuple(rhs[j].split(" ")) if rhs[j] else (), int(counts[j]))
                for j in range(self._rhs_at[n], self._rhs_at[n + 1])]

    def label_df(self, word: str) -> int:
        """How many terms' labels use ``word`` (from its IDF weight; 0 when none does)."""
        w = self.idf.get(stem(word.lower()))
        return 0 if w is None else round(self.meta["terms"] / math.expm1(w))

    def names_with_initials(self, initials: str) -> np.ndarray:
        """The rows of the names with a run of words of these initials ("vdr": ventral double row; empty when
        none)."""
        n = self._initial_at.get(initials)
        rows = self.arrays["initial_rows"]
        return rows[:0] if n is None else rows[self._row_at[n]:self._row_at[n + 1]]


class Columns:
    """A model's columns as the vectorised re-ranker reads them: where each term's labels, each label's stems and each
    term's definition stems start, the stems' codes, and per vocabulary code its regulation-frame bit."""

    def __init__(self, lex: RerankModel):
        a = lex.arrays
        starts = lambda x: np.concatenate(([0], np.cumsum(x, dtype=np.int64)))  # noqa: E731
        self.label_at, self.stem_at, self.def_at = starts(a["labels"]), starts(a["sizes"]), starts(a["def_sizes"])
        self.stems, self.def_stems = a["stems"].astype(np.int64), a["def_stems"].astype(np.int64)
        self.weights, self.scopes = a["weights"].astype(np.float64), a["scopes"].astype(np.int64)
        self.generality = a["generality"].astype(np.float64)
        self.code = {t: c for c, t in enumerate(lex.vocab)}
        self.frame_bits = np.zeros(len(lex.vocab) + 1)
        for n, f in enumerate(FRAME):
            if (c := self.code.get(f)) is not None:
                self.frame_bits[c] = 1 << n
