"""The training plan of one epoch, in plain Python and numpy (no torch): which (anchor, positive, hard negative)
label triples are trained on, in which batches.

- **Pairs.** Every training term with synonyms gives up to ``max_pairs_per_term`` of them as anchors (a seeded draw
  per epoch, so a term with 284 synonyms does not drown the rest and every synonym gets its turn over the epochs);
  the positive is the term's name, or, for ``synonym_positive_share`` of the anchors of terms with two or more
  synonyms, another of its synonyms (the leave-one-out case: a synonym found through a sibling synonym).
- **Definitions** (``definition_share``, 0 by default): that share of the training terms that have a definition
  also give the pair (definition → name), the definition as a row after every label row. A definition is never a
  positive, a mined negative or a label: the vectors served are the labels'. Held-out terms' definitions are not in
  the corpus at all.
- **Negatives.** Every other positive and negative of the batch is an in-batch negative (multiple-negatives ranking
  loss). Each triple also carries one hard negative: from the second epoch on, for ``model_negative_share`` of the
  anchors, the label the model itself put nearest among other terms' labels (:func:`mine`, over the embeddings the
  previous epoch computed anyway, so mining costs no extra forward pass); otherwise the name of an is_a sibling
  (unless ``sibling_negatives`` is off); failing both, a random training term of the same ontology. A "wrong"
  label whose text equals the anchor's (another term's identical synonym) is never a negative.
- **Batches.** No term twice in a batch (as anchor or negative: its name would be both the answer and a negative),
  and batches cut from length-sorted runs of ``BUCKET`` batches, then shuffled, so padding stays small on a CPU.

Everything is drawn from ``random.Random`` seeded with (seed, epoch): the same seed gives the same plan.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from search.ontology.encoder.config import TrainConfig
from search.ontology.encoder.labels import LabelTable

#: length-sorted runs of this many batches are cut into batches (less padding, still mixed)
BUCKET = 32
#: labels of other terms looked at per anchor when mining (the first wrong one whose text differs is taken)
MINE_DEPTH = 8
KINDS = ("random", "sibling", "model")


@dataclass(frozen=True)
class PlanConfig:
    batch_size: int = 64
    max_pairs_per_term: int = 4
    synonym_positive_share: float = 0.25
    model_negative_share: float = 0.5
    sibling_negatives: bool = True   # False: no sibling negatives (a random term instead: the curve's baseline)
    definition_share: float = 0.0

    @classmethod
    def of(cls, cfg: TrainConfig) -> PlanConfig:
        """The plan's share of a training's settings."""
        return cls(cfg.batch_size, cfg.max_pairs_per_term, cfg.synonym_positive_share, cfg.model_negative_share,
                   cfg.sibling_negatives, cfg.definition_share)


class Corpus:
    """The training side of several label tables, as one numbering of label rows (table by table); with
    ``definitions``, the training terms' definitions as rows after them (a training with ``definition_share`` > 0:
    otherwise they would only grow the embedding bank and its checkpoints)."""

    def __init__(self, tables: Sequence[LabelTable], splits: Sequence[Sequence[str]], definitions: bool = False):
        self.tables = list(tables)
        self.texts: list[str] = []
        self.term: list[int] = []          # per row: its global term number
        self.table_of_term: list[int] = []
        self.rows_of: list[list[int]] = []  # per global term: its rows (the name's first)
        self.train_terms: list[int] = []   # global term numbers in the training split
        self.first_term: list[int] = []
        self.train_by_table: list[list[int]] = []
        for n, (table, parts) in enumerate(zip(self.tables, splits, strict=True)):
            offset_row, offset_term = len(self.texts), len(self.table_of_term)
            self.first_term.append(offset_term)
            self.texts += table.texts
            self.term += [offset_term + t for t in table.term]
            self.table_of_term += [n] * len(table.ids)
            self.rows_of += [[offset_row + r for r in rows] for rows in table.labels_of]
            train = [offset_term + t for t, s in enumerate(parts) if s == "train"]
            self.train_terms += train
            self.train_by_table.append(train)
        self.is_train = np.zeros(len(self.table_of_term), dtype=bool)
        self.is_train[self.train_terms] = True
        #: rows below this are labels; above, training terms' definitions (:attr:`definition_row`)
        self.label_rows = len(self.texts)
        self.definition_row: dict[int, int] = {}
        for n, table in enumerate(self.tables if definitions else ()):   # only for a training that pairs them
            for t, text in enumerate(table.definitions):
                g = self.first_term[n] + t
                if text and self.is_train[g]:
                    self.definition_row[g] = len(self.texts)
                    self.texts.append(text)
                    self.term.append(g)
        self.keys = [" ".join(t.casefold().split()) for t in self.texts]

    def siblings(self, g: int) -> list[int]:
        n = self.table_of_term[g]
        off = self.first_term[n]
        return [off + s for s in self.tables[n].siblings(g - off) if self.is_train[off + s]]

    def labels(self, g: int) -> list[int]:
        return self.rows_of[g]

    @property
    def train_rows(self) -> list[int]:
        return [r for g in self.train_terms for r in self.rows_of[g]]

    def pair_count(self, cfg: PlanConfig) -> int:
        """Anchors per epoch (the definitions' drawn share: about)."""
        return (sum(min(len(self.rows_of[g]) - 1, cfg.max_pairs_per_term) for g in self.train_terms)
                + round(cfg.definition_share * len(self.definition_row)))


@dataclass
class Plan:
    """One epoch: per triple its anchor, positive and negative label rows and the negative's kind (index into
    :data:`KINDS`); ``batches`` index the triples."""

    anchor: np.ndarray
    positive: np.ndarray
    negative: np.ndarray
    kind: np.ndarray
    batches: list[np.ndarray]

    def kind_counts(self) -> dict[str, int]:
        return {k: int((self.kind == i).sum()) for i, k in enumerate(KINDS)}


def anchors(corpus: Corpus, cfg: PlanConfig, seed: int, epoch: int) -> list[tuple[int, int]]:
    """This epoch's ``(anchor row, positive row)`` pairs."""
    rng = random.Random(f"pairs\x00{seed}\x00{epoch}")
    out = []
    for g in corpus.train_terms:
        rows = corpus.rows_of[g]
        syns = rows[1:]
        if not syns:
            continue
        for a in rng.sample(syns, min(len(syns), cfg.max_pairs_per_term)):
            others = [r for r in syns if r != a]
            use_syn = others and rng.random() < cfg.synonym_positive_share
            out.append((a, rng.choice(others) if use_syn else rows[0]))
    if cfg.definition_share > 0:   # a draw of its own, so the synonym pairs stay those of a run without
        rng = random.Random(f"definitions\x00{seed}\x00{epoch}")
        out += [(row, corpus.rows_of[g][0]) for g, row in corpus.definition_row.items()
                if rng.random() < cfg.definition_share]
    return out


def plan(corpus: Corpus, cfg: PlanConfig, seed: int, epoch: int, mined: dict[int, list[int]] | None = None) -> Plan:
    """The epoch's triples and batches. ``mined`` maps an anchor row to the label rows the model put nearest to it
    (best first, other terms only; :func:`mine`); None in the first epoch."""
    pairs = anchors(corpus, cfg, seed, epoch)
    rng = random.Random(f"plan\x00{seed}\x00{epoch}")
    rows_a, rows_p, rows_n, kinds = [], [], [], []
    for a, p in pairs:
        g = corpus.term[a]
        neg, kind = -1, 0
        if mined and rng.random() < cfg.model_negative_share:
            for r in mined.get(a, ()):
                if corpus.term[r] != g and corpus.keys[r] != corpus.keys[a]:
                    neg, kind = r, 2
                    break
        if neg < 0 and cfg.sibling_negatives:
            sibs = corpus.siblings(g)
            if sibs:
                neg, kind = corpus.rows_of[rng.choice(sibs)][0], 1
        if neg < 0 or corpus.keys[neg] == corpus.keys[a]:
            pool = corpus.train_by_table[corpus.table_of_term[g]]
            for _ in range(8):
                other = rng.choice(pool)
                if other != g:
                    neg, kind = corpus.rows_of[other][0], 0
                    break
            else:
                continue   # a one-term ontology: no negative to draw
        rows_a.append(a)
        rows_p.append(p)
        rows_n.append(neg)
        kinds.append(kind)
    anchor, positive, negative = (np.asarray(x, dtype=np.int64) for x in (rows_a, rows_p, rows_n))
    return Plan(anchor, positive, negative, np.asarray(kinds, dtype=np.int8),
                batches(corpus, anchor, positive, negative, cfg.batch_size, rng))


def batches(corpus: Corpus, anchor: np.ndarray, positive: np.ndarray, negative: np.ndarray, size: int,
            rng: random.Random) -> list[np.ndarray]:
    """Triples in batches of ``size`` without a term twice, cut from length-sorted runs, in a shuffled order."""
    order = list(range(len(anchor)))
    rng.shuffle(order)
    term = corpus.term
    length = [max(len(corpus.texts[anchor[i]]), len(corpus.texts[positive[i]]), len(corpus.texts[negative[i]]))
              for i in range(len(anchor))]
    out: list[np.ndarray] = []
    run = size * BUCKET
    for start in range(0, len(order), run):
        chunk = sorted(order[start:start + run], key=lambda i: length[i])
        pending = chunk
        while pending:
            batch: list[int] = []
            used: set[int] = set()
            later: list[int] = []
            for i in pending:
                ta, tn = term[anchor[i]], term[negative[i]]
                if len(batch) < size and ta not in used and tn not in used:
                    batch.append(i)
                    used.update((ta, tn))
                else:
                    later.append(i)
            out.append(np.asarray(batch, dtype=np.int64))
            pending = later
    rng.shuffle(out)
    return [b for b in out if len(b) >= 2]


def mine(corpus: Corpus, bank: np.ndarray, present: np.ndarray, wanted: Sequence[int], depth: int = MINE_DEPTH,
         chunk: int = 256) -> dict[int, list[int]]:
    """For each anchor row in ``wanted`` (whose own vector is in the bank, else its term's name's), the ``depth``
    nearest bank rows of other terms, best first. ``bank`` holds unit vectors of the rows where ``present``; rows of
    held-out terms and definitions are never candidates."""
    cand = np.flatnonzero(present[: corpus.label_rows])   # labels only: a definition is never a negative
    if not len(cand) or not len(wanted):
        return {}
    cand_term = np.asarray(corpus.term, dtype=np.int64)[cand]
    matrix = bank[cand].astype(np.float32)
    queries = []
    for a in wanted:
        q = a if present[a] else corpus.rows_of[corpus.term[a]][0]
        queries.append(q if present[q] else -1)
    out: dict[int, list[int]] = {}
    k = min(len(cand), depth + 8)
    for s in range(0, len(wanted), chunk):
        rows = [(a, q) for a, q in zip(wanted[s:s + chunk], queries[s:s + chunk], strict=True) if q >= 0]
        if not rows:
            continue
        sims = bank[[q for _, q in rows]].astype(np.float32) @ matrix.T
        top = (np.argpartition(-sims, k - 1, axis=1)[:, :k] if k < sims.shape[1]
               else np.tile(np.arange(k), (len(rows), 1)))
        for (a, _), cols, srow in zip(rows, top, sims, strict=True):
            cols = cols[np.argsort(-srow[cols], kind="stable")]
            g = corpus.term[a]
            out[a] = [int(cand[c]) for c in cols if cand_term[c] != g][:depth]
    return out
