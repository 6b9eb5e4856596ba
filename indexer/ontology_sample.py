"""The small ontology sample ``flysift demo`` indexes, so the README's term examples run after ``demo``.

``indexer/data/ontology_sample/`` holds three OBO slices (gzipped): GO and FBbt cut down to the terms FlyBase
annotates to the demo's genes (GO annotations and curated expression, FB2025_04) plus the README's examples, closed
under ``is_a`` and ``part_of`` so every kept term keeps its ancestors; FBdv whole. Sources, versions and licences:
``indexer/data/ontology_sample/NOTICE.md``. ``python -m indexer.ontology_sample SHARED_DATA_DIR`` rebuilds them from
the shared data folder (go-basic.obo.gz, fbbt-2013-07-26.obo, fbdv.obo and FlyAOC's raw_data files).
"""

from __future__ import annotations

import gzip
import re
import sys
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

#: ontology name -> package data file under indexer/data/ontology_sample
SAMPLE_FILES = {"go": "go_sample.obo.gz", "fbbt": "fbbt_sample.obo.gz", "fbdv": "fbdv.obo.gz"}
#: terms the README's examples look up, kept whatever the annotations say
EXTRA_SEEDS = {"go": {"GO:0001745", "GO:0007423", "GO:0035220"}, "fbbt": {"FBbt:00004508", "FBbt:00001766"}}
_KEEP = ("id:", "name:", "namespace:", "def:", "synonym:", "alt_id:", "is_a:", "relationship: part_of ")
_REF = re.compile(r"\b(GO:\d{7}|FBbt:\d{8})\b")


def sample_files() -> dict[str, Path]:
    """The shipped sample, name -> file (inside the installed package)."""
    root = resources.files("indexer").joinpath("data", "ontology_sample")
    return {name: Path(str(root.joinpath(f))) for name, f in SAMPLE_FILES.items()}


def _open(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def _stanzas(path: Path) -> tuple[list[str], dict[str, list[str]]]:
    """The header lines and every live [Term] stanza by id."""
    header: list[str] = []
    terms: dict[str, list[str]] = {}
    block: list[str] | None = None
    with _open(path) as fh:
        for raw in fh:
            line = raw.rstrip("\n")
            if line.startswith("["):
                if block and block[0] == "[Term]":
                    _add(terms, block)
                block = [line]
            elif block is None:
                header.append(line)
            elif line:
                block.append(line)
        if block and block[0] == "[Term]":
            _add(terms, block)
    return header, terms


def _add(terms: dict[str, list[str]], block: list[str]) -> None:
    ids = [ln[4:].strip() for ln in block if ln.startswith("id:")]
    if ids and "is_obsolete: true" not in block:
        terms[ids[0]] = block


def _parents(block: list[str]) -> list[str]:
    return [m.group(1) for ln in block if ln.startswith(("is_a:", "relationship: part_of "))
            for m in [_REF.search(ln.split("!")[0].split(":", 1)[1])] if m]


def slice_obo(path: Path, seeds: Iterable[str], out: Path) -> int:
    """Write the terms ``seeds`` and all their is_a/part_of ancestors (gzipped OBO); returns the number of terms."""
    header, terms = _stanzas(path)
    keep: set[str] = set()
    todo = [s for s in seeds if s in terms]
    while todo:
        t = todo.pop()
        if t not in keep:
            keep.add(t)
            todo.extend(p for p in _parents(terms[t]) if p in terms and p not in keep)
    with gzip.GzipFile(out, "wb", mtime=0) as gz:
        text = "\n".join(ln for ln in header if not ln.startswith(("remark:", "import:"))) + "\n"
        for tid in sorted(keep):
            lines = [ln for ln in terms[tid] if ln == "[Term]" or ln.startswith(_KEEP)]
            lines = [ln for ln in lines if not ln.startswith(("is_a:", "relationship:"))
                     or (_REF.search(ln) and _REF.search(ln).group(1) in keep)]  # type: ignore[union-attr]
            text += "\n" + "\n".join(lines) + "\n"
        gz.write(text.encode("utf-8"))
    return len(keep)


def build(shared: Path, out_dir: Path) -> dict[str, int]:
    """Rebuild the sample from the shared data folder (see the module docstring)."""
    from indexer.synthetic import bundled_genes

    genes = {g.id for g in bundled_genes()}
    raw = shared / "flyaoc" / "raw_data"
    go_seeds = set(EXTRA_SEEDS["go"])
    with gzip.open(raw / "gene_association.fb.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            cells = line.split("\t")
            if not line.startswith("!") and len(cells) > 4 and cells[1] in genes:
                go_seeds.add(cells[4])
    fbbt_seeds = set(EXTRA_SEEDS["fbbt"])
    with gzip.open(raw / "curated_expression_fb_2025_04.tsv.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.split("\t", 1)[0] in genes:
                fbbt_seeds.update(re.findall(r"FBbt:\d{8}", line))
    out_dir.mkdir(parents=True, exist_ok=True)
    onto = shared / "ontologies"
    counts = {"go": slice_obo(onto / "go-basic.obo.gz", go_seeds, out_dir / SAMPLE_FILES["go"]),
              "fbbt": slice_obo(onto / "fbbt-2013-07-26.obo", fbbt_seeds, out_dir / SAMPLE_FILES["fbbt"])}
    with open(onto / "fbdv.obo", "rb") as src, gzip.GzipFile(out_dir / SAMPLE_FILES["fbdv"], "wb", mtime=0) as gz:
        gz.write(src.read())
    return counts


if __name__ == "__main__":  # pragma: no cover - a maintainer's tool
    print(build(Path(sys.argv[1]), Path(__file__).parent / "data" / "ontology_sample"))
