"""Supplementary files, measured: extraction coverage against a hand count, extraction throughput, index growth per
supplement MB, identifier recall before and after, and (optionally) the registry of CRAFT's articles.

    python bench/bench_supplements.py                       # coverage, throughput, growth and recall
    python bench/bench_supplements.py --craft ../shared/data/craft/articles    # + what CRAFT's XML names

* **Coverage**: every real file of ``tests/fixtures/supplements`` (MANIFEST.md has the hand counts) is extracted;
  cells (tables: data rows plus the header), pages (PDF) and paragraphs (text) recovered are compared with
  ``HAND_COUNT``.
* **Throughput**: the real files, and a generated 100,000-row sheet (XLSX and CSV), extracted ``--repeat`` times:
  files/s and MB/s on wall and CPU time (the machine is shared: CPU time is the steadier figure).
* **Index growth and recall**: the package of ``tests/helpers.py`` with a generated 20,000-row allele sheet, indexed
  without its supplements (the article alone: what flysift did before) and with them, into the embedded engine;
  index bytes per supplement MB, and recall of every identifier (allele, gene symbol, GO id) that occurs only in
  the supplements: the share of them for which a paper search returns the paper and a passage search returns the
  supplement passage naming it.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from indexer.pipeline import index_corpus  # noqa: E402
from indexer.supplements.chunks import Budget  # noqa: E402
from indexer.supplements.files import extract_file, named_files  # noqa: E402
from indexer.supplements.limits import DEFAULT  # noqa: E402
from search.core.config import Settings  # noqa: E402
from search.core.query import Filters  # noqa: E402
from search.core.supplements import SupplementFile  # noqa: E402
from search.services import Services  # noqa: E402

from helpers import SUPPLEMENT_FIXTURES, supplement_package  # type: ignore[import-not-found]  # noqa: E402

#: the hand counts of tests/fixtures/supplements/MANIFEST.md: (unit, count)
HAND_COUNT = {
    "calamine-base.xlsx": ("cells", 19), "calamine-base.xls": ("cells", 10), "calamine-base.ods": ("cells", 10),
    "calamine-table-multiple.xlsx": ("cells", 45), "calamine-any_sheets.xls": ("cells", 13),
    "pdfplumber-issue-33-lorem-ipsum.pdf": ("pages", 2), "pdfplumber-scotus-transcript-p1.pdf": ("pages", 1),
    "python-docx-blk-paras-and-tables.docx": ("units", 3), "python-docx-tbl-having-tables.docx": ("units", 0),
    "python-docx-test.docx": ("units", 2),
}


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def extract(path: Path):
    entry = SupplementFile(index=1, name=path.name, status="missing", size=path.stat().st_size)
    out: list = []
    extract_file("PMC1", None, entry, path, DEFAULT, Budget(DEFAULT.max_file_chars, DEFAULT.max_paper_chars), out)
    return entry, out


def recovered(entry, passages, unit: str) -> int:
    if unit == "pages":
        return sum(p.count for p in entry.parts if p.unit == "page")
    cells = sum(1 for p in passages for row in p.supplement.items for c in row if c)
    headers = sum(1 for p in entry.parts for c in (p.header or []) if c)
    return cells + headers


def coverage() -> list[dict]:
    rows = []
    for name, (unit, hand) in HAND_COUNT.items():
        entry, passages = extract(SUPPLEMENT_FIXTURES / "real" / name)
        got = recovered(entry, passages, unit)
        rows.append({"file": name, "status": entry.status, "unit": unit, "hand": hand, "extracted": got,
                     "coverage": round(got / hand, 3) if hand else (1.0 if got == 0 else 0.0)})
    return rows


def big_sheet(folder: Path, rows: int) -> tuple[Path, Path]:
    import openpyxl  # only to write the generated sheet (reading uses calamine)

    xlsx, csv_path = folder / "big.xlsx", folder / "big.csv"
    wb = openpyxl.Workbook(write_only=True)
    ws = wb.create_sheet("Alleles")
    header = ["allele", "gene", "phenotype", "score", "stock", "notes"]
    ws.append(header)
    with open(csv_path, "w") as fh:
        fh.write(",".join(header) + "\n")
        for i in range(rows):
            row = [f"Dl[B{i}]", "Dl", "wing margin notching", i * 0.5, f"BL{10000 + i}", "homozygous lethal"]
            ws.append(row)
            fh.write(",".join(map(str, row)) + "\n")
    wb.save(xlsx)
    return xlsx, csv_path


def throughput(files: list[Path], repeat: int) -> dict:
    size = sum(f.stat().st_size for f in files)
    t0, c0 = time.perf_counter(), cpu()
    passages = 0
    for _ in range(repeat):
        for f in files:
            passages += len(extract(f)[1])
    wall, used = time.perf_counter() - t0, cpu() - c0
    n = len(files) * repeat
    return {"files": n, "MB": round(size * repeat / 1e6, 2), "wall_s": round(wall, 2), "cpu_s": round(used, 2),
            "files_per_s": round(n / wall, 1), "MB_per_s_wall": round(size * repeat / 1e6 / wall, 2),
            "MB_per_s_cpu": round(size * repeat / 1e6 / used, 2), "passages": passages // repeat,
            "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def allele_package(folder: Path, rows: int) -> tuple[Path, list[str]]:
    """The test package plus a generated allele sheet; the identifiers only its supplements hold."""
    import openpyxl

    pkg = supplement_package(folder)
    rng = random.Random(7)
    wb = openpyxl.Workbook(write_only=True)
    ws = wb.create_sheet("Alleles")
    ws.append(["Allele", "Gene", "Stock", "GO term"])
    ids = []
    for i in range(rows):
        allele = f"Xq{i}[{rng.randrange(10**6)}]"
        go = f"GO:{9000000 + i:07d}"
        ws.append([allele, "Dl", f"BL{20000 + i}", go])
        ids += [allele, go] if i % 200 == 0 else []
    wb.save(pkg / "S5.xlsx")
    return pkg, ids + ["Dl[RevF10]", "Ser[Bd-G]", "GO:0007219", "GO:0045747", "Su(H)[SF8]"]


def growth_and_recall(rows: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-supp-"))
    try:
        pkg, ids = allele_package(tmp / "pkg", rows)
        before_dir = tmp / "article-only"
        before_dir.mkdir()
        shutil.copy(pkg / "PMC990001.nxml", before_dir / "PMC990001.nxml")
        supp_bytes = sum(f.stat().st_size for f in pkg.iterdir() if not f.name.endswith(".nxml"))
        out: dict = {}
        for label, source in (("before", before_dir), ("after", pkg)):
            settings = Settings(data_dir=tmp / f"data-{label}", engine="embedded")
            t0, c0 = time.perf_counter(), cpu()
            summary = index_corpus([source], Services.open(settings), workers=1)
            wall, used = time.perf_counter() - t0, cpu() - c0
            svc = Services.open(settings).search
            st = svc.engine().stats()
            papers = sum(any(h.pmcid == "PMC990001" for h in svc.search_papers(f'"{i}"', limit=5).hits) for i in ids)
            passages = sum(any(h.source == "supplement" and i in h.text
                               for h in svc.search_passages(f'"{i}"', limit=5,
                                                            filters=Filters(source="supplement")).hits)
                           for i in ids)
            out[label] = {"passages": summary.passages, "index_bytes": st.index_bytes, "index_wall_s": round(wall, 2),
                          "index_cpu_s": round(used, 2), "paper_recall": round(papers / len(ids), 3),
                          "passage_recall": round(passages / len(ids), 3)}
        out["identifiers"] = len(ids)
        out["supplement_MB"] = round(supp_bytes / 1e6, 3)
        out["index_bytes_per_supplement_MB"] = round((out["after"]["index_bytes"] - out["before"]["index_bytes"])
                                                     / (supp_bytes / 1e6))
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def craft_registry(folder: Path) -> dict:
    """What CRAFT's articles name (they ship without the files: every entry is ``missing``)."""
    from lxml import etree

    counts: dict[str, int] = {}
    articles = with_files = 0
    for path in sorted(folder.glob("*.nxml")):
        articles += 1
        named = named_files(etree.parse(str(path)).getroot())
        with_files += bool(named)
        for f in named:
            suffix = Path(f.name).suffix.lower() or "(none)"
            counts[suffix] = counts.get(suffix, 0) + 1
    return {"articles": articles, "articles_naming_files": with_files, "files_by_suffix": dict(sorted(counts.items()))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000, help="rows of the generated sheet (throughput)")
    ap.add_argument("--recall-rows", type=int, default=20_000, help="rows of the allele sheet (growth, recall)")
    ap.add_argument("--repeat", type=int, default=5, help="passes over the real files (throughput)")
    ap.add_argument("--craft", type=Path, help="CRAFT's articles folder: count the supplements their XML names")
    args = ap.parse_args()
    report: dict = {"coverage": coverage()}
    real = sorted(p for p in (SUPPLEMENT_FIXTURES / "real").iterdir() if "password" not in p.name)
    report["throughput_real"] = throughput(real, args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        xlsx, csv_path = big_sheet(Path(tmp), args.rows)
        report["throughput_100k_xlsx"] = throughput([xlsx], 1)
        report["throughput_100k_csv"] = throughput([csv_path], 1)
    report["growth_and_recall"] = growth_and_recall(args.recall_rows)
    if args.craft:
        report["craft"] = craft_registry(args.craft)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
