"""``flysift supplements list|read``: a paper's supplementary files and a page of a sheet, table, text or PDF, for a
person (tables) or a program (``--json``, ``--csv`` with formula injection neutralised)."""

from __future__ import annotations

from pathlib import Path

import click

from search.cli.options import data_dir_option, echo_json, print_table, settings_for
from search.core.names import DEFAULT_COLLECTION
from search.core.supplements import SupplementPlace


def where(place: SupplementPlace | None) -> str:
    """``S1.xlsx › Alleles, rows 4-5`` (file, sheet or part, and the rows, pages or paragraphs)."""
    if place is None:
        return ""
    span = next(((k, v) for k in ("rows", "pages", "paragraphs") if (v := getattr(place, k)) is not None), None)
    text = f"{place.file} › {place.sheet}"
    if span:
        key, (a, b) = span
        text += f", {key[:-1] if a == b else key} {a}" + (f"-{b}" if b != a else "")
    return text


@click.group()
def supplements() -> None:
    """A paper's supplementary files (spreadsheets, tables, PDFs, documents)."""


@supplements.command("list")
@click.argument("pmcid")
@data_dir_option
@click.option("--collection", default=DEFAULT_COLLECTION, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the REST response body")
def list_files(pmcid: str, data_dir: Path | None, collection: str, as_json: bool) -> None:
    """The files of PMCID with their sheets or pages and extraction status."""
    from search.services import Services

    res = Services.open(settings_for(data_dir)).search.supplements(pmcid, collection=collection)
    if as_json:
        echo_json(res)
        return
    if not res.files:
        click.echo(f"{res.pmcid} has no supplementary files.")
        return
    rows = [{"n": f.index, "name": f.name, "label": f.label or "", "status": f.status,
             "parts": "; ".join(f"{p.index}: {p.name} ({p.count} {p.unit}s)" for p in f.parts[:8])
             + (f"; … {len(f.parts) - 8} more" if len(f.parts) > 8 else ""),
             "reason": f.reason or ""} for f in res.files]
    cols = [("#", "n", 4), ("file", "name", 30), ("label", "label", 16), ("status", "status", 11),
            ("sheets / parts", "parts", 50), ("reason", "reason", 50)]
    print_table(rows, [c for c in cols if any(r[c[1]] for r in rows)])


@supplements.command("read")
@click.argument("pmcid")
@click.argument("file")
@data_dir_option
@click.option("--part", "--sheet", "part", help="Sheet or part: number (0 first) or name [default: the first]")
@click.option("--start", type=click.IntRange(min=0), help="First row, paragraph or page")
@click.option("--limit", "-n", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--collection", default=DEFAULT_COLLECTION, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the REST response body")
@click.option("--csv", "as_csv", is_flag=True, help="Print the rows as CSV (header first, formulas neutralised)")
def read(pmcid: str, file: str, data_dir: Path | None, part: str | None, start: int | None, limit: int,
         collection: str, as_json: bool, as_csv: bool) -> None:
    """A page of FILE (its number in `supplements list`, or its name)."""
    from search.retrieval.supplements import as_csv as csv_text
    from search.services import Services

    search = Services.open(settings_for(data_dir)).search
    page = search.read_supplement(pmcid, file, part=part, start=start, limit=limit, collection=collection)
    if as_json:
        echo_json(page)
        return
    if as_csv:
        click.echo(csv_text(page), nl=False)
        return
    p = page.part
    click.echo(f"{page.file.name} › {p.name} ({p.kind}): {p.unit}s {page.rows[0].n if page.rows else '-'}"
               f"-{page.rows[-1].n if page.rows else '-'} of {p.first}-{p.last}"
               + (f"; next: --start {page.next_start}" if page.next_start else ""))
    if p.unit == "row":
        width = max([len(p.header or [])] + [len(r.cells) for r in page.rows])
        header = (p.header or []) + [""] * (width - len(p.header or []))
        titles = [h or f"col {i + 1}" for i, h in enumerate(header)]
        rows = [{"n": r.n, **{str(i): c for i, c in enumerate(r.cells)}} for r in page.rows]
        print_table(rows, [("row", "n", 6)] + [(t, str(i), 40) for i, t in enumerate(titles)])
    else:
        for r in page.rows:
            click.echo(f"[{p.unit} {r.n}] {r.cells[0]}\n")
