"""A seeded generator of FlyAOC-shaped papers, for tests, demos and benchmarks at full corpus scale.

The real FlyAOC corpus cannot be reached from our machines, so benchmarks need a stand-in with the same shape
(16,898 papers, ~8,300 words each, INTRO/METHODS/RESULTS/DISCUSS/CONCL paragraphs) and with the properties that make
gene search hard: genes named by symbol, full name and older synonyms, in brackets and before punctuation, with Greek
letters and case collisions (``dl``/``Dl``, ``N`` next to ``n = 12``). Each paper is "about" one or two focus genes
(mentioned often, usually in title and abstract) and names a few background genes in passing; the answer key records
the focus genes, so retrieval quality can be measured against it.

Everything is drawn from ``numpy`` generators seeded by ``(seed, paper number)``: the same configuration gives the
same bytes, any paper can be made without making the ones before it, and text is assembled by indexing one token
table with whole arrays (no per-word Python loop), which is what lets 140 M words be written in minutes.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click
import numpy as np

from search.core.errors import InputError, InvalidRequest
from search.core.models import Gene, Paper, Section

GENES_TSV = Path(__file__).parent / "data" / "genes.tsv"
_TSV_COLUMNS = ("id", "symbol", "fullname", "symbol_synonyms", "fullname_synonyms")
_TSV_HEADER = "\t".join(_TSV_COLUMNS)

#: body sections in document order: (type, title, share of the body's words)
_SECTIONS = (("INTRO", "Introduction", 0.16), ("METHODS", "Materials and methods", 0.24),
             ("RESULTS", "Results", 0.36), ("DISCUSS", "Discussion", 0.19), ("CONCL", "Conclusions", 0.05))

_FUNCTION_WORDS = """the of and in to a that is was were for with by as on we this are from be at an which these
not or also have has been its their both but than after all our into during when between only two each other
it can may more most such however whereas within while using whether here only through one three several
further thus found shown suggesting indicating no similar different same whose those under without""".split()

# Domain words of fly papers. ``dorsal``, ``notched``, ``delta`` and ``twist`` are here on purpose: ordinary words that
# equal a gene name once lower-cased, as in real text ("dorsal closure", "notched wings").
_BIOLOGY_WORDS = """expression protein gene mutant mutants cells cell embryos embryo larvae larval adult wing disc
discs eye tissue signaling signalling pathway transcription factor activity function required levels loss
phenotype phenotypes allele alleles clones clone imaginal development developmental stage stages anterior
posterior dorsal ventral lateral medial segment segments segmentation pattern patterning boundary compartment
regulation regulates regulated regulatory target targets binding domain domains receptor ligand membrane nuclear
nucleus cytoplasm cytoplasmic apical basal polarity epithelial epithelium junctions adherens actin myosin
microtubule cortex cortical neuroblast neuroblasts neurons neuronal axon axons glia brain ventral nerve cord
mesoderm ectoderm endoderm gastrulation germband extension cellularization blastoderm syncytial oocyte oogenesis
ovary ovaries follicle germline stem niche testis spermatogenesis gut midgut hindgut muscle muscles tracheal
trachea salivary gland fat body hemocytes immune response apoptosis proliferation growth size differentiation
specification fate determination identity homeotic Hox cluster enhancer enhancers promoter repressor activator
repression activation transcriptional post-translational phosphorylation ubiquitination degradation stability
localization localized accumulation gradient morphogen concentration threshold response responses genetic
interaction interactions screen screening RNAi knockdown overexpression ectopic rescue rescued rescues
heterozygous homozygous hemizygous lethal lethality viable fertility sterile female male females males
antibody antibodies staining immunostaining confocal microscopy images quantification analysis analyses
western blot blots qPCR RT-PCR sequencing transcriptome genome genomic chromatin histone methylation binding
sites site motif motifs conserved conservation vertebrate mammalian human mouse homolog homologue ortholog
evolution evolutionary species flies fly Drosophila melanogaster stock stocks crosses cross balancer driver
transgene transgenic reporter construct constructs fusion tagged GFP lacZ insertion deletion deficiency
complementation mapping mapped locus loci chromosome arm region regions interval breakpoint sequence sequences
amino acid residues mutation mutations missense nonsense null hypomorphic dominant recessive negative positive
effect effects increased decreased reduced enhanced strong weak mild severe defects defect abnormal normal
wild-type control controls experiment experiments data results result observed observe consistent model models
mechanism mechanisms role roles process processes component components complex complexes interacts partner
partners network networks feedback loop loops signal signals cascade downstream upstream dependent independent
delta notched twist morphogenesis organogenesis metamorphosis pupal pupae puparium ecdysone hormone insulin
nutrition metabolism metabolic lipid glucose feeding behavior behaviour courtship mating circadian sleep
olfactory photoreceptor photoreceptors ommatidia retina bristle bristles sensory organ organs precursor
precursors lineage lineages asymmetric division divisions mitosis mitotic cycle checkpoint DNA RNA mRNA
transcripts transcript isoform isoforms splicing translation translational ribosome vesicle vesicles endocytosis
trafficking secretion secreted extracellular matrix adhesion migration invasion tumor tumour overgrowth
neoplastic hyperplastic suppressor oncogene kinase phosphatase ligase protease channel transporter""".split()

_TISSUES = ("embryo", "wing disc", "eye-antennal disc", "ovary", "testis", "larval brain", "midgut",
            "embryonic epidermis", "mesoderm", "ventral nerve cord", "salivary gland", "fat body",
            "follicle epithelium")
_PROCESSES = ("segmentation", "dorsoventral patterning", "wing growth", "cell polarity", "neurogenesis",
              "germband extension", "tissue growth", "cell fate specification", "epithelial morphogenesis",
              "courtship behaviour", "apoptosis", "boundary formation", "oogenesis")
_TITLES = ("{g} regulates {p} in the Drosophila {t}",
           "The role of {g} in {p}",
           "{G} controls {p} in the {t}",
           "Genetic analysis of {f} ({g}) function during {p}",
           "{g} and {b} cooperate during {p} in Drosophila",
           "A genetic screen identifies {g} as a regulator of {p}",
           "Loss of {g} disrupts {p} in the Drosophila {t}",
           "{p} in the Drosophila {t} requires {g}")
_UNTITLED = ("Mechanisms of {p} in the Drosophila {t}", "A genome-wide view of {p}",
             "{P} in the developing {t}")
_JOURNALS = ("Development", "Dev Biol", "PLoS Genet", "Genetics", "eLife", "Curr Biol", "J Cell Biol",
             "Genes Dev", "Dev Cell", "Cell Rep", "Nat Commun", "PLoS One", "G3 (Bethesda)", "BMC Dev Biol",
             "Proc Natl Acad Sci U S A", "Sci Rep")
#: reagents and statistics written as fly papers write them; ``n = 12`` is the lower-case twin of the symbol ``N``
_EXTRAS = tuple(f"(n = {k})" for k in (6, 8, 10, 12, 15, 20, 24, 30, 48)) + tuple(
    f"n = {k}" for k in (5, 9, 12, 16, 25, 40)) + (
    "(P < 0.05)", "(P < 0.01)", "P < 0.001", "(Fig. 2A)", "(Fig. 3B)", "(Figure 4)", "(Supplementary Fig. S1)",
    "Df(3L)ED4543", "Df(3L)ED4543/TM6B", "Df(3L)ED4543,", "UAS-GFP", "GAL4", "w1118", "CyO", "TM3, Sb", "25 °C",
    "18 °C", "FRT82B", "hs-FLP", "UAS-RNAi")

_PUNCT = ("", ",", ".", ";")          # filler/mention variants 0..3
_N_PUNCT = len(_PUNCT)
_ZIPF_TABLE_BITS = 22


@dataclass
class SyntheticConfig:
    """What to generate. ``words_per_paper`` is the mean; lengths vary about it (log-normal, σ 0.35)."""

    n_papers: int = 200
    words_per_paper: int = 1500
    seed: int = 7
    genes: list[Gene] | None = None
    #: number of distinct filler word types (hand-written biology words plus generated pseudo-words)
    vocabulary: int = 60_000
    _genes: list[Gene] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.n_papers < 1:
            raise InvalidRequest(f"n_papers must be at least 1, got {self.n_papers}")
        if self.words_per_paper < 300:
            raise InvalidRequest(f"words_per_paper must be at least 300, got {self.words_per_paper}")
        if not 0 <= self.seed < 2**63:
            raise InvalidRequest(f"seed must be a non-negative 64-bit integer, got {self.seed}")
        self._genes = list(self.genes) if self.genes is not None else bundled_genes()
        if len(self._genes) < 3:
            raise InvalidRequest(f"need at least 3 genes (focus plus background), got {len(self._genes)}")


# --------------------------------------------------------------------------------------------------------- gene list

def read_genes_tsv(path: Path) -> list[Gene]:
    """Genes from a TSV with the columns of ``_TSV_COLUMNS`` ('#' lines are comments; synonyms '|'-separated)."""
    genes: list[Gene] = []
    header_seen = False
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cells = line.split("\t")
            if not header_seen:
                if tuple(cells) != _TSV_COLUMNS:
                    raise InputError(f"{path}:{lineno}: header must be {_TSV_HEADER!r}, got {line!r}",
                                     source=str(path), record=lineno, field="header")
                header_seen = True
                continue
            if len(cells) != len(_TSV_COLUMNS):
                raise InputError(f"{path}:{lineno}: expected {len(_TSV_COLUMNS)} tab-separated columns, "
                                 f"got {len(cells)}", source=str(path), record=lineno)
            row = dict(zip(_TSV_COLUMNS, cells, strict=True))
            for name in ("id", "symbol", "fullname"):
                if not row[name].strip():
                    raise InputError(f"{path}:{lineno}: field {name!r} is empty", source=str(path),
                                     record=lineno, field=name)
            if not (row["id"].startswith("FBgn") and row["id"][4:].isdigit() and len(row["id"]) == 11):
                raise InputError(f"{path}:{lineno}: field 'id' must be FBgn plus 7 digits, got {row['id']!r}",
                                 source=str(path), record=lineno, field="id")
            genes.append(Gene(id=row["id"], symbol=row["symbol"], fullname=row["fullname"],
                              symbol_synonyms=[s for s in row["symbol_synonyms"].split("|") if s],
                              fullname_synonyms=[s for s in row["fullname_synonyms"].split("|") if s]))
    if not header_seen:
        raise InputError(f"{path}: no header line", source=str(path), field="header")
    return genes


def write_genes_tsv(genes: list[Gene], path: Path) -> None:
    """The inverse of ``read_genes_tsv``, so a generated corpus carries the gene list it was made from."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(_TSV_HEADER + "\n")
        for g in genes:
            fh.write("\t".join((g.id, g.symbol, g.fullname or "", "|".join(g.symbol_synonyms),
                                "|".join(g.fullname_synonyms))) + "\n")


def bundled_genes() -> list[Gene]:
    """The ~45 real Drosophila genes of ``indexer/data/genes.tsv``, hard cases for text analysis included."""
    return read_genes_tsv(GENES_TSV)


# ------------------------------------------------------------------------------------------------------ token table

class _Tables:
    """Every string a paper is assembled from, in one object array, plus the index ranges of each kind.

    Layout: filler words ``V`` types × 4 punctuation variants × {lower, Capitalised}: id = w + V·(punct + 4·cap);
    then the extras; then gene mentions: for gene-name k, id = m0 + 8·k + punct + 4·bracketed.
    """

    def __init__(self, cfg: SyntheticConfig):
        rng = np.random.default_rng([cfg.seed, 2])
        genes = cfg._genes
        taken = {n.lower() for g in genes for n in _names(g)}
        words = list(dict.fromkeys(_FUNCTION_WORDS + rng.permutation(_BIOLOGY_WORDS).tolist()))
        seen = {w.lower() for w in words} | taken
        pseudo = _pseudo_words(rng, cfg.vocabulary - len(words), seen)
        words += pseudo
        self.n_words = v = len(words)
        strings: list[str] = []
        for cap in (False, True):
            for punct in _PUNCT:
                strings += [(w[:1].upper() + w[1:] if cap else w) + punct for w in words]
        self.extra0 = len(strings)
        strings += _EXTRAS
        self.mention0 = len(strings)
        # per gene: names [symbol, *symbol_synonyms, fullname, *fullname_synonyms, "fullname (symbol)"]
        self.name_ids: list[np.ndarray] = []      # per gene, global name index of each name
        self.name_p: list[np.ndarray] = []        # per gene, probability of using each name in body text
        self.intro_name: list[int] = []           # per gene, index of the "fullname (symbol)" form
        self.symbol_name: list[int] = []
        self.fullname_name: list[int] = []
        self.name_text: list[str] = []
        for g in genes:
            names = _names(g) + [f"{g.fullname} ({g.symbol})"]
            base = len(self.name_text)
            self.name_text += names
            n_sym, n_full = len(g.symbol_synonyms), len(g.fullname_synonyms)
            p = [0.62] + [0.14 / max(n_sym, 1)] * n_sym + [0.16] + [0.08 / max(n_full, 1)] * n_full + [0.0]
            p_arr = np.array(p, dtype=float)
            self.name_p.append(p_arr / p_arr.sum())
            self.name_ids.append(np.arange(base, base + len(names)))
            self.symbol_name.append(base)
            self.fullname_name.append(base + 1 + n_sym)
            self.intro_name.append(base + len(names) - 1)
            for name in names:
                for bracketed in (False, True):
                    strings += [(f"({name})" if bracketed else name) + p for p in _PUNCT]
        self.strings = np.array(strings, dtype=object)
        # Zipf–Mandelbrot word frequencies, sampled through a lookup table (one integer draw per word)
        ranks = np.arange(1, v + 1, dtype=float)
        prob = 1.0 / (ranks + 2.7) ** 1.08
        counts = np.maximum(1, np.round(prob / prob.sum() * 2**_ZIPF_TABLE_BITS)).astype(np.int64)
        self.zipf = np.repeat(np.arange(v, dtype=np.int32), counts)

    def mention(self, name: np.ndarray, punct: np.ndarray, bracketed: np.ndarray) -> np.ndarray:
        return self.mention0 + 8 * name + punct + 4 * bracketed


def _names(g: Gene) -> list[str]:
    return [g.symbol, *g.symbol_synonyms, g.fullname or g.symbol, *g.fullname_synonyms]


_ONSETS = "b c d f g h k l m n p r s t v z br cr dr fl gr pl pr sk st tr ch sh th".split()
_NUCLEI = "a e i o u ae ai ea ei io ou".split()
_CODAS = ["", "", "", "n", "r", "s", "l", "m", "t", "x", "nd", "st", "ph"]
_SUFFIXES = [""] * 10 + ["in", "ase", "al", "ic", "ous", "ation", "ide", "ome", "ity", "ing", "ed", "s"]


def _pseudo_words(rng: np.random.Generator, n: int, seen: set[str]) -> list[str]:
    """``n`` distinct pronounceable made-up words (the rare tail of the vocabulary), none equal to a gene name."""
    out: list[str] = []
    while len(out) < n:
        k = 2 * (n - len(out)) + 64
        n_syl = rng.choice([1, 2, 3], size=k, p=[0.25, 0.55, 0.2])
        words = np.full(k, "", dtype=object)
        for j in range(3):
            syl = (rng.choice(_ONSETS, size=k).astype(object) + rng.choice(_NUCLEI, size=k).astype(object)
                   + rng.choice(_CODAS, size=k).astype(object))
            words = np.where(n_syl > j, words + syl, words)
        words = words + rng.choice(_SUFFIXES, size=k).astype(object)
        for w in dict.fromkeys(words.tolist()):
            if w not in seen:
                seen.add(w)
                out.append(w)
    return out[:n]


# ------------------------------------------------------------------------------------------------------------- plan

@dataclass
class _Plan:
    """Per-paper decisions that the answer key depends on, drawn for all papers at once (a few arrays of n ints)."""

    focus1: np.ndarray
    focus2: np.ndarray       # -1 when the paper has one focus gene
    year: np.ndarray
    journal: np.ndarray
    words: np.ndarray


def _gene_popularity(rng: np.random.Generator, n_genes: int) -> np.ndarray:
    """A few genes are studied far more than others (as Notch or dpp are): Zipf weights over a seeded order."""
    w = 1.0 / (rng.permutation(n_genes) + 3.0) ** 0.9
    return w / w.sum()


def _plan(cfg: SyntheticConfig) -> _Plan:
    rng = np.random.default_rng([cfg.seed, 0])
    n, g = cfg.n_papers, len(cfg._genes)
    pop = _gene_popularity(rng, g)
    focus1 = rng.choice(g, size=n, p=pop)
    focus1[: min(n, g)] = np.arange(min(n, g))      # every gene has a paper about it once n ≥ number of genes
    second = rng.choice(g, size=n, p=pop)
    two = (rng.random(n) < 0.3) & (second != focus1)
    focus2 = np.where(two, second, -1)
    year = np.clip(np.round(rng.normal(2012, 7, size=n)), 1985, 2025).astype(int)
    journal = rng.integers(len(_JOURNALS), size=n)
    words = np.maximum(300, np.round(cfg.words_per_paper * rng.lognormal(-0.35**2 / 2, 0.35, size=n))).astype(int)
    return _Plan(focus1, focus2, year, journal, words)


def pmcid(i: int) -> str:
    """The identifier of paper ``i`` (0-based): ``PMC9`` followed by six digits, as in recent PMC ids."""
    return f"PMC{9_000_000 + i}"


def answer_key(cfg: SyntheticConfig) -> dict[str, list[str]]:
    """Gene id → PMCIDs of the papers made "about" that gene, without generating any text."""
    plan = _plan(cfg)
    key: dict[str, list[str]] = {g.id: [] for g in cfg._genes}
    for i in range(cfg.n_papers):
        key[cfg._genes[plan.focus1[i]].id].append(pmcid(i))
        if plan.focus2[i] >= 0:
            key[cfg._genes[plan.focus2[i]].id].append(pmcid(i))
    return key


# ----------------------------------------------------------------------------------------------------------- papers

def generate(cfg: SyntheticConfig) -> Iterator[Paper]:
    """The papers, one at a time (memory does not grow with ``n_papers``)."""
    tables = _Tables(cfg)
    plan = _plan(cfg)
    pop = _gene_popularity(np.random.default_rng([cfg.seed, 0]), len(cfg._genes))
    for i in range(cfg.n_papers):
        yield _paper(cfg, tables, plan, pop, i)


def _paper(cfg: SyntheticConfig, t: _Tables, plan: _Plan, pop: np.ndarray, i: int) -> Paper:
    rng = np.random.default_rng([cfg.seed, 1, i])
    genes = cfg._genes
    focus = [int(plan.focus1[i])] + ([int(plan.focus2[i])] if plan.focus2[i] >= 0 else [])
    bg_p = pop.copy()
    bg_p[focus] = 0
    n_bg = min(int(rng.integers(2, 7)), int((bg_p > 0).sum()))
    background = rng.choice(len(genes), size=n_bg, replace=False, p=bg_p / bg_p.sum()).tolist()

    title = _title(rng, t, genes, focus, background)
    total = int(plan.words[i])
    abstract_words = int(np.clip(total * 0.1, 120, 280))
    body_words = max(200, total - abstract_words - len(title.split()))

    # the abstract names the focus gene(s) once in "full name (symbol)" form, then mostly by symbol
    abstract = _text(rng, t, abstract_words, [(f, 0.012, True) for f in focus]
                     + [(b, 0.002, False) for b in background[:1]], paragraph_words=None)[0]
    shares = np.array([s for _, _, s in _SECTIONS]) * rng.uniform(0.75, 1.25, size=len(_SECTIONS))
    has_concl = rng.random() < 0.6
    if not has_concl:
        shares[-1] = 0
    shares /= shares.sum()
    sections = []
    # focus genes: ~1 mention per 180 words (the first focus more); background genes: 1–3 mentions per paper
    per_word = [(f, (1 / 180) * (1.0 if k == 0 else 0.55), k == 0) for k, f in enumerate(focus)]
    bg_rate = [(b, rng.integers(1, 4) / body_words, False) for b in background]
    for (stype, stitle, _), share in zip(_SECTIONS, shares, strict=True):
        n = int(round(body_words * share))
        if n < 20:
            continue
        genes_here = [(f, r, intro and stype == "INTRO") for f, r, intro in per_word] + bg_rate
        sections.append(Section(type=stype, title=stitle, paragraphs=_text(rng, t, n, genes_here, paragraph_words=120)))
    return Paper(pmcid=pmcid(i), year=int(plan.year[i]), journal=_JOURNALS[plan.journal[i]], title=title,
                 abstract=abstract, sections=sections)


def _title(rng: np.random.Generator, t: _Tables, genes: list[Gene], focus: list[int], background: list[int]) -> str:
    """Most titles name the first focus gene (by symbol, sometimes by full name); some name no gene at all."""
    g = genes[focus[0]]
    p, tissue = _PROCESSES[rng.integers(len(_PROCESSES))], _TISSUES[rng.integers(len(_TISSUES))]
    r = rng.random()
    if r < 0.12:
        tpl = _UNTITLED[rng.integers(len(_UNTITLED))]
        return tpl.format(p=p, P=p[:1].upper() + p[1:], t=tissue)
    name = g.symbol if r < 0.8 else (g.fullname or g.symbol)
    other = genes[focus[1]] if len(focus) > 1 else genes[background[0]]
    tpl = _TITLES[rng.integers(len(_TITLES))]
    return tpl.format(g=name, G=name[:1].upper() + name[1:] if name == g.fullname else name, f=g.fullname or g.symbol,
                      b=other.symbol, p=p, t=tissue)


def _text(rng: np.random.Generator, t: _Tables, n: int, genes: list[tuple[int, float, bool]],
          paragraph_words: int | None) -> list[str]:
    """``n`` words of prose as paragraphs (one paragraph when ``paragraph_words`` is None).

    ``genes`` lists (gene, mentions per word, introduce): mention positions are drawn at that rate; when
    ``introduce`` is set the first mention is the "full name (symbol)" form. Mentions take over the punctuation of
    the word they replace, and one in five is bracketed, so ``(Su(H)),`` and ``Su(H);`` occur.
    """
    ids = t.zipf[rng.integers(len(t.zipf), size=n)].astype(np.int64)
    # sentences of 6–34 words: capitalise the first word, end the last with a period; commas and semicolons inside
    lengths = rng.integers(6, 35, size=n // 6 + 2)
    ends = np.cumsum(lengths) - 1
    ends = ends[ends < n - 1]
    ends = np.append(ends, n - 1)
    punct = np.zeros(n, dtype=np.int64)
    r = rng.random(n)
    punct[r < 0.07] = 1
    punct[r > 0.995] = 3
    punct[ends] = 2
    cap = np.zeros(n, dtype=np.int64)
    cap[0] = 1
    cap[ends[:-1] + 1] = 1
    out = ids + t.n_words * (punct + _N_PUNCT * cap)
    extra = np.flatnonzero(rng.random(n) < 1 / 350)
    out[extra] = t.extra0 + rng.integers(len(_EXTRAS), size=len(extra))
    for g, rate, introduce in genes:
        k = rng.binomial(n, min(rate, 0.2)) + (1 if introduce else 0)
        if k == 0:
            continue
        pos = np.sort(rng.choice(n, size=min(k, n), replace=False))
        names = rng.choice(t.name_ids[g], size=len(pos), p=t.name_p[g])
        bracketed = (rng.random(len(pos)) < 0.2).astype(np.int64)
        if introduce:
            names[0], bracketed[0] = t.intro_name[g], 0
        out[pos] = t.mention(names, punct[pos], bracketed)
    tokens = t.strings[out].tolist()
    if paragraph_words is None:
        return [" ".join(tokens)]
    # paragraph breaks at the sentence end nearest to every ~paragraph_words (40–250 words per paragraph)
    targets = np.cumsum(rng.integers(40, 2 * paragraph_words + 10, size=n // 40 + 2))
    cuts = np.unique(ends[np.minimum(np.searchsorted(ends, targets), len(ends) - 1)]) + 1
    bounds = [0, *cuts.tolist()]
    if bounds[-1] != n:
        bounds.append(n)
    return [" ".join(tokens[a:b]) for a, b in itertools.pairwise(bounds)]


# ------------------------------------------------------------------------------------------------------------ files

def flyaoc_record(paper: Paper) -> dict:
    """A paper in FlyAOC's export shape: ``sections`` maps a section type to its paragraphs in document order."""
    sections: dict[str, list[str]] = {}
    for s in paper.sections:
        sections.setdefault(s.type, []).extend(s.paragraphs)
    return {"pmcid": paper.pmcid, "title": paper.title, "abstract": paper.abstract, "year": paper.year,
            "journal": paper.journal, "sections": sections}


def write_corpus(cfg: SyntheticConfig, out_dir: Path) -> dict:
    """Write ``corpus.jsonl``, ``answer_key.json`` and ``genes.tsv`` into ``out_dir``; return counts and seconds.

    Files are written under a temporary name and renamed, so an interrupted run leaves no half corpus behind.
    """
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    corpus = out_dir / "corpus.jsonl"
    papers = words = 0
    tmp = corpus.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for paper in generate(cfg):
            rec = flyaoc_record(paper)
            fh.write(json.dumps(rec, ensure_ascii=False))
            fh.write("\n")
            papers += 1
            words += _count_words(rec)
    os.replace(tmp, corpus)
    key = answer_key(cfg)
    (out_dir / "answer_key.json").write_text(json.dumps(key, indent=1) + "\n", encoding="utf-8")
    write_genes_tsv(cfg._genes, out_dir / "genes.tsv")
    return {"papers": papers, "words": words, "bytes": corpus.stat().st_size, "genes": len(cfg._genes),
            "seed": cfg.seed, "out": str(out_dir), "seconds": round(time.perf_counter() - started, 2)}


def _count_words(rec: dict) -> int:
    """Whitespace-separated words (the generator writes single spaces and no leading/trailing blanks)."""
    texts = [rec["title"], rec["abstract"], *(p for ps in rec["sections"].values() for p in ps)]
    return sum(s.count(" ") + 1 for s in texts if s)


@click.command("sample")
@click.option("--papers", "n_papers", type=click.IntRange(min=1), default=200, show_default=True,
              help="Number of papers (FlyAOC has 16,898).")
@click.option("--words", "words_per_paper", type=click.IntRange(min=300), default=1500, show_default=True,
              help="Mean words per paper (FlyAOC averages ~8,300).")
@click.option("--seed", type=click.IntRange(min=0), default=7, show_default=True)
@click.option("--genes", "genes_tsv", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Gene list TSV (id, symbol, fullname, symbol_synonyms, fullname_synonyms); default: bundled.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for corpus.jsonl, answer_key.json and genes.tsv.")
def sample_command(n_papers: int, words_per_paper: int, seed: int, genes_tsv: Path | None, out_dir: Path) -> None:
    """Generate a synthetic FlyAOC-shaped corpus with its answer key (gene id → papers about it)."""
    genes = read_genes_tsv(genes_tsv) if genes_tsv else None
    summary = write_corpus(SyntheticConfig(n_papers=n_papers, words_per_paper=words_per_paper, seed=seed,
                                           genes=genes), out_dir)
    click.echo(json.dumps(summary))


if __name__ == "__main__":
    sample_command()
