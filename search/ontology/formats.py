"""Ontology files: OBO (through fastobo), OWL RDF/XML and OBO Graphs JSON (through pronto), plain or gzipped, read
into the columns ``search.ontology.model.Ontology`` keeps (ids, names, namespaces, definitions, synonyms, alt ids,
obsolete flags, replacements, and the edges: child row, relation, parent id, whether the line had qualifiers).

OBO is parsed with ``fastobo`` directly: pronto drops the ``{…}`` qualifiers of ``is_a`` lines (FlyAOC's FBbt DAG must
skip qualified lines, spec §4.4) and refuses relationships whose ``[Typedef]`` is not declared, while fastobo keeps
every clause and reports syntax errors with a line number. OWL RDF/XML and OBO Graphs JSON (what ROBOT and the OBO
Foundry publish beside OBO) need pronto, the optional ``owl`` extra; without it such a file is one line naming the
install. The format is read from the file's first bytes, not its name: ``{`` is OBO Graphs JSON, ``<`` OWL RDF/XML,
anything else OBO. pronto is told never to follow ``owl:imports`` (a file must not make the indexer fetch URLs).

Relations are named as in the file, except that a relation given by a prefixed id (``FBdv:00018001``,
``BFO:0000050``) takes its ``[Typedef]`` name (OWL: its label) with spaces as underscores (``substage_of``,
``part_of``). Terms read through pronto come in id order, their synonyms and cross-references sorted (those formats
hold sets).
"""

from __future__ import annotations

import gzip
import re
import warnings
from pathlib import Path
from typing import Any, BinaryIO, Literal

from search.core.errors import InputError
from search.core.extras import require

IS_A = "is_a"
SCOPES = ("EXACT", "NARROW", "BROAD", "RELATED")
Format = Literal["obo", "owl", "obographs"]
#: what each format is called in messages
FORMAT_NAMES: dict[Format, str] = {"obo": "OBO", "owl": "OWL RDF/XML", "obographs": "OBO Graphs JSON"}
#: a ``consider`` that OBO Graphs JSON writes as a plain property value (pronto reads it as an annotation)
CONSIDER_IRI = "http://www.geneontology.org/formats/oboInOwl#consider"
#: bytes read to tell the formats apart
SNIFF_BYTES = 4096


def _open(path: Path) -> BinaryIO:
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gzipped else open(path, "rb")  # type: ignore[return-value]


def sniff(path: Path) -> Format:
    """The file's format, from its first bytes (a byte-order mark and white space skipped)."""
    try:
        with _open(path) as fh:
            head = fh.read(SNIFF_BYTES)
    except (OSError, EOFError) as e:
        raise InputError(f"{path}: cannot read ontology file: {e}", source=str(path)) from None
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    return "obographs" if head.startswith(b"{") else "owl" if head.startswith(b"<") else "obo"


def parse(path: Path, name: str) -> dict[str, Any]:
    """The columns of the ontology file at ``path``, whichever of the three formats it is in."""
    fmt = sniff(path)
    return _parse_obo(path, name) if fmt == "obo" else _parse_pronto(path, name, fmt)


def relation_name(rel_id: str, label: str | None) -> str:
    """A relation as the service names it: a prefixed id (``BFO:0000050``) by its label with spaces as underscores
    (``part_of``), else the id as written."""
    if ":" in rel_id and label:
        return re.sub(r"\W+", "_", label.strip()).strip("_")
    return rel_id


def _parse_obo(path: Path, name: str) -> dict[str, Any]:
    """Read an OBO file (plain or gzipped) into the columns."""
    import fastobo  # parsing only: a service reads the compact form, and the CLI's term search neither

    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            doc = fastobo.load(fh)
    except SyntaxError as e:
        raise InputError(f"{path}: line {e.lineno}: malformed OBO: {e.msg} ({(e.text or '').strip()!r})",
                         source=str(path), record=e.lineno, field="obo") from None
    except (OSError, EOFError, ValueError) as e:
        raise InputError(f"{path}: cannot read OBO file: {e}", source=str(path)) from None

    data_version = None
    default_ns = None
    for clause in doc.header:
        tag = clause.raw_tag()
        if tag == "data-version":
            data_version = clause.raw_value()
        elif tag == "default-namespace":
            default_ns = clause.raw_value()

    rel_names: dict[str, str] = {}
    term_frames = []
    for frame in doc:
        kind = type(frame).__name__
        if kind == "TypedefFrame":
            rid = str(frame.id)
            if ":" in rid:
                label = next((c.name for c in frame if c.raw_tag() == "name"), None)
                if label:
                    rel_names[rid] = relation_name(rid, label)
        elif kind == "TermFrame":
            term_frames.append(frame)

    cols: dict[str, list] = {k: [] for k in ("ids", "names", "namespaces", "defs", "synonyms", "alt_ids",
                                               "obsolete", "replaced_by", "consider")}
    edges: list[tuple[int, str, str, bool]] = []
    seen: set[str] = set()
    for frame in term_frames:
        tid = str(frame.id)
        if tid in seen:
            raise InputError(f"{path}: term {tid}: duplicate [Term] stanza", source=str(path), pmcid=None,
                             field="id")
        seen.add(tid)
        idx = len(cols["ids"])
        nm, ns, df, obs = "", default_ns, "", False
        syns, alts, repl, cons = [], [], [], []
        for c in frame:
            tag = c.raw_tag()
            if tag == "name":
                nm = c.name
            elif tag == "namespace":
                ns = str(c.namespace)
            elif tag == "def":
                df = c.definition
            elif tag == "synonym":
                syns.append((c.synonym.desc, c.synonym.scope if c.synonym.scope in SCOPES else "RELATED"))
            elif tag == "alt_id":
                alts.append(str(c.alt_id))
            elif tag == "is_obsolete":
                obs = bool(c.obsolete)
            elif tag == "replaced_by":
                repl.append(str(c.term))
            elif tag == "consider":
                cons.append(str(c.term))
            elif tag == "is_a":
                edges.append((idx, IS_A, str(c.term), bool(c.qualifiers)))
            elif tag == "relationship":
                rel = str(c.typedef)
                edges.append((idx, rel_names.get(rel, rel), str(c.term), bool(c.qualifiers)))
        for key, val in (("ids", tid), ("names", nm), ("namespaces", ns), ("defs", df), ("synonyms", tuple(syns)),
                         ("alt_ids", tuple(alts)), ("obsolete", obs), ("replaced_by", tuple(repl)),
                         ("consider", tuple(cons))):
            cols[key].append(val)
    if not cols["ids"]:
        raise InputError(f"{path}: no [Term] stanzas: not an OBO ontology", source=str(path), field="obo")
    return {"name": name, "source": str(path), "data_version": data_version, **cols, "edges": edges}


def _parse_pronto(path: Path, name: str, fmt: Format) -> dict[str, Any]:
    """Read OWL RDF/XML or OBO Graphs JSON with pronto into the columns."""
    what = f"reading {FORMAT_NAMES[fmt]} ({path.name})"
    pronto = require("pronto", "owl", what)
    try:
        with _open(path) as fh, warnings.catch_warnings():
            warnings.simplefilter("ignore")   # pronto warns per element it does not map; the columns say what counts
            ont = pronto.Ontology(fh, import_depth=0)
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except BaseException as e:   # pronto's parsers raise XML, JSON, syntax and key errors; fastobo's graph reader can
        # panic on a malformed graph (a Rust panic is a BaseException)
        reason = " ".join(str(e).split())[:200]
        raise InputError(f"{path}: cannot read {FORMAT_NAMES[fmt]}: {type(e).__name__}: {reason}", source=str(path),
                         field=fmt) from None
    cols: dict[str, list[Any]] = {k: [] for k in ("ids", "names", "namespaces", "defs", "synonyms", "alt_ids",
                                                   "obsolete", "replaced_by", "consider")}
    edges: list[tuple[int, str, str, bool]] = []
    default_ns = ont.metadata.default_namespace
    for idx, t in enumerate(sorted(ont.terms(), key=lambda t: t.id)):
        syns = sorted((s.description, s.scope if s.scope in SCOPES else "RELATED") for s in t.synonyms)
        consider = {c.id for c in t.consider} | {a.resource for a in t.annotations
                                                  if a.property == CONSIDER_IRI and hasattr(a, "resource")}
        for key, val in (("ids", t.id), ("names", t.name or ""), ("namespaces", t.namespace or default_ns),
                         ("defs", str(t.definition or "")), ("synonyms", tuple(syns)),
                         ("alt_ids", tuple(sorted(t.alternate_ids))), ("obsolete", bool(t.obsolete)),
                         ("replaced_by", tuple(sorted(r.id for r in t.replaced_by))),
                         ("consider", tuple(sorted(consider)))):
            cols[key].append(val)
        edges += [(idx, IS_A, p.id, False) for p in sorted(t.superclasses(distance=1, with_self=False),
                                                           key=lambda p: p.id)]
        for rel, targets in sorted(t.relationships.items(), key=lambda kv: kv[0].id):
            edges += [(idx, relation_name(rel.id, rel.name), p.id, False) for p in sorted(targets, key=lambda p: p.id)]
    if not cols["ids"]:
        raise InputError(f"{path}: no classes: not an ontology ({FORMAT_NAMES[fmt]})", source=str(path), field=fmt)
    return {"name": name, "source": str(path), "data_version": ont.metadata.data_version, **cols, "edges": edges}
