"""The CLI for people: ``flysift search``, ``passages``, ``paper``, ``similar`` and ``collections``.

Searches read the query language (``--syntax plain`` for words only), show each hit with its matched words marked
(bold and coloured on a terminal, plain when piped) and wrap at word boundaries; ``--format`` writes an export
instead (CSV, TSV, RIS, BibTeX, JSON Lines, TREC), ``--json`` the REST answer. Everything goes through
``SearchService`` in this process, as the REST routes do.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from search.cli.options import data_dir_option, echo_json, settings_for
from search.cli.render import MARK_OFF, MARK_ON, marked, paragraph, styled, table
from search.cli.supplements import where
from search.core.names import DEFAULT_COLLECTION

FORMATS = ("csv", "tsv", "ris", "bibtex", "jsonl", "trec")


def _color(no_color: bool) -> bool:
    return not no_color and sys.stdout.isatty()


def _lexicon_sets(settings: Any, gene: str | None) -> tuple[list[str], frozenset[str], frozenset[str]]:
    """The gene's names (``--gene``), the fold set and the compound names of the configured lexicon."""
    from search.sessions.policy import search_expansions
    from search.sessions.service import load_lexicon

    lex = load_lexicon(settings.lexicon, settings.data_dir)()
    names = search_expansions(lex, gene, None) if gene else []
    return names, lex.foldable(), lex.compounds()


def search_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options ``search`` and ``passages`` share."""
    for option in reversed([
        click.argument("query"),
        data_dir_option,
        click.option("--limit", "-n", type=int, default=10, show_default=True),
        click.option("--offset", type=int, default=0),
        click.option("--collection", default=DEFAULT_COLLECTION, show_default=True),
        click.option("--year-from", type=int),
        click.option("--year-to", type=int),
        click.option("--section", "sections", multiple=True, help="Only papers with / passages in this section type "
                                                                   "(repeatable; or section:results in the query)"),
        click.option("--source", type=click.Choice(["paper", "supplement"]),
                     help="Match the articles' text only, or their supplementary files only [default: both]"),
        click.option("--gene", help="Also match this gene's names (FlyBase id or current symbol; the lexicon's)"),
        click.option("--syntax", type=click.Choice(["query", "plain"]), default="query", show_default=True,
                     help="query: +must -not AND OR NOT (…) \"phrases\" title: abstract: gene: year: section: "
                          "pmcid:; plain: words and phrases only"),
        click.option("--explain", is_flag=True, help="Show how each word was read (symbol or word view, and why)"),
        click.option("--facets", is_flag=True, help="Count all matches by year and by section"),
        click.option("--format", "fmt", type=click.Choice(FORMATS),
                     help="Write every hit (up to --max-hits) as this format to stdout instead"),
        click.option("--max-hits", type=int, default=None, help="The most hits --format writes (default: all, up to "
                                                                "FLYSIFT_MAX_EXPORT_HITS)"),
        click.option("--no-color", is_flag=True, help="No bold/colour even on a terminal"),
        click.option("--json", "as_json", is_flag=True, help="Print the REST response body"),
    ]):
        fn = option(fn)
    return fn


def _filters(year_from: int | None, year_to: int | None, sections: tuple[str, ...], source: str | None) -> Any:
    from search.core.query import Filters

    return Filters(year_from=year_from, year_to=year_to, section_types=list(sections) or None,
                   source=source)  # type: ignore[arg-type]


def _export(svc: Any, kind: str, query: str, fmt: str, limit: int, **kw: Any) -> None:
    out = sys.stdout
    for piece in svc.export(kind, query, fmt, limit=limit, **kw):
        out.write(piece)
    out.flush()


def _print_explain(explained: dict[str, Any], color: bool) -> None:
    rows = []
    for t in explained.get("tokens", []):
        extra = [f"{k} {v}" for k, v in t.items() if k not in ("token", "view", "why", "parts")]
        if t.get("parts"):
            extra.append("parts: " + ", ".join(f"{p['token']} ({p['view']})" for p in t["parts"]))
        rows.append({"token": t["token"], "view": t["view"], "why": t["why"], "more": "; ".join(extra)})
    click.echo(table(rows, [("token", "token", 30), ("read as", "view", 8), ("why", "why", 40),
                            ("also", "more", 40)], color))
    if explained.get("expanded"):
        click.echo(f"gene names added: {', '.join(explained['expanded'])}")
    click.echo()


def _print_facets(facets: dict[str, dict[str, int]] | None) -> None:
    for name, counts in (facets or {}).items():
        if counts:
            click.echo(f"{name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if facets:
        click.echo()


def _spec() -> Any:
    from search.core.query import HighlightSpec

    return HighlightSpec(pre_tag=MARK_ON, post_tag=MARK_OFF, fragment_size=200, number_of_fragments=1)


@click.command()
@search_options
def search(query: str, data_dir: Path | None, limit: int, offset: int, collection: str, year_from: int | None,
           year_to: int | None, sections: tuple[str, ...], source: str | None, gene: str | None, syntax: str,
           explain: bool, facets: bool, fmt: str | None, max_hits: int | None, no_color: bool, as_json: bool) -> None:
    """Search papers: gene-aware BM25 (Dl ≠ dl), read as the query language by default.

    A match in a supplementary file says where (file, sheet, rows).

    \b
    flysift search 'Shh -limb'                  Shh papers that do not mention limbs
    flysift search 'title:BRCA2 year:2005..'    BRCA2 in the title, 2005 or later
    flysift search '"wing disc" AND (Dpp OR Wg)' --facets
    flysift search Su(H) --format ris > su-h.ris"""
    from search.services import Services

    settings = settings_for(data_dir)
    svc = Services.open(settings).search
    names, foldable, compounds = _lexicon_sets(settings, gene)
    filters = _filters(year_from, year_to, sections, source)
    if fmt:
        _export(svc, "papers", query, fmt, max_hits or settings.max_export_hits, filters=filters,
                collection=collection, expansions=names, syntax=syntax, foldable=foldable, compounds=compounds)
        return
    res = svc.search_papers(query, limit=limit, offset=offset, filters=filters, snippets=as_json,
                            collection=collection, expansions=names, syntax=syntax,  # type: ignore[arg-type]
                            highlight=None if as_json else _spec(), facets=("year", "section") if facets else (),
                            explain_plan=explain, foldable=foldable, compounds=compounds)
    if as_json:
        echo_json(res)
        return
    color = _color(no_color)
    if explain:
        _print_explain(res.query.get("explain", {}), color)
    click.echo(f"{res.total} papers match; showing {offset + 1 if res.hits else 0}-{offset + len(res.hits)} "
               f"({res.took_ms:.0f} ms)\n")
    _print_facets(res.facets)
    for i, h in enumerate(res.hits, start=offset + 1):
        hl = h.highlight or {}
        title = hl.get("title", [h.title])[0]
        click.echo(paragraph(title, color, indent=5, first=f"{i}."))
        meta = " · ".join(str(x) for x in (h.pmcid, h.year, h.journal, f"score {h.score:.2f}",
                                           f"matched {', '.join(h.matched)}" if h.matched else None) if x)
        click.echo(paragraph(meta, False, indent=5))
        if h.supplement is not None:
            click.echo(paragraph(f"in supplement: {where(h.supplement)}", False, indent=5))
        shown = set()
        for key in ("abstract", "passage"):
            for frag in hl.get(key, [])[:1]:
                if frag in shown:   # the best passage is often the abstract's
                    continue
                shown.add(frag)
                label = h.best_passage if key == "passage" else "abstract"
                click.echo(paragraph(f"[{label}] {frag}", color, indent=5))
        click.echo()


@click.command()
@search_options
def passages(query: str, data_dir: Path | None, limit: int, offset: int, collection: str, year_from: int | None,
             year_to: int | None, sections: tuple[str, ...], source: str | None, gene: str | None, syntax: str,
             explain: bool, facets: bool, fmt: str | None, max_hits: int | None, no_color: bool,
             as_json: bool) -> None:
    """Search evidence passages (paragraphs with stable ids and offsets), with their papers' titles."""
    from search.services import Services

    settings = settings_for(data_dir)
    svc = Services.open(settings).search
    names, foldable, compounds = _lexicon_sets(settings, gene)
    filters = _filters(year_from, year_to, sections, source)
    if fmt:
        _export(svc, "passages", query, fmt, max_hits or settings.max_export_hits, filters=filters,
                collection=collection, expansions=names, syntax=syntax, foldable=foldable, compounds=compounds)
        return
    res = svc.search_passages(query, limit=limit, offset=offset, filters=filters, collection=collection,
                              expansions=names, syntax=syntax, snippets=as_json,  # type: ignore[arg-type]
                              highlight=None if as_json else _spec(), titles=True,
                              facets=("year", "section") if facets else (), explain_plan=explain,
                              foldable=foldable, compounds=compounds)
    if as_json:
        echo_json(res)
        return
    color = _color(no_color)
    if explain:
        _print_explain(res.query.get("explain", {}), color)
    click.echo(f"{res.total} passages match; showing {offset + 1 if res.hits else 0}-{offset + len(res.hits)} "
               f"({res.took_ms:.0f} ms)\n")
    _print_facets(res.facets)
    for i, h in enumerate(res.hits, start=offset + 1):
        click.echo(paragraph(" · ".join(x for x in (h.passage_id, h.section_type, f"score {h.score:.2f}",
                                                     where(h.supplement)) if x), False, indent=5, first=f"{i}."))
        if h.title:
            click.echo(paragraph(h.title, False, indent=5))
        frags = (h.highlight or {}).get("text") or [h.text[:300]]
        click.echo(paragraph(frags[0], color, indent=5))
        click.echo()


@click.command()
@click.argument("pmcid")
@data_dir_option
@click.option("--collection", default=DEFAULT_COLLECTION, show_default=True)
@click.option("--section", "sections", multiple=True, help="Only this section (abstract, intro, results…; "
                                                           "repeatable)")
@click.option("--query", "-q", help="Mark this query's matches (the query language)")
@click.option("--gene", help="Mark this gene's names (FlyBase id or current symbol)")
@click.option("--matches-only", is_flag=True, help="Only the passages with a match")
@click.option("--no-color", is_flag=True, help="No bold/colour even on a terminal")
@click.option("--json", "as_json", is_flag=True, help="Print the paper with the marked ranges as JSON")
def paper(pmcid: str, data_dir: Path | None, collection: str, sections: tuple[str, ...], query: str | None,
          gene: str | None, matches_only: bool, no_color: bool, as_json: bool) -> None:
    """Read a paper: sections with their headings, each passage with its id, the query's matches and the gene's
    names marked."""
    from search.retrieval.boolean import SECTION_NAMES
    from search.services import Services

    settings = settings_for(data_dir)
    names, foldable, compounds = _lexicon_sets(settings, gene)
    wanted = [SECTION_NAMES.get(s.lower(), s.upper()) for s in sections] or None
    view = Services.open(settings).search.paper_view(pmcid, collection=collection, sections=wanted, query=query,
                                              expansions=names, foldable=foldable, compounds=compounds)
    if as_json:
        echo_json(view)
        return
    color = _color(no_color)
    click.echo(paragraph(marked(view.title, view.title_highlights), color))
    ids = " · ".join(x for x in (view.pmcid, f"PMID {view.pmid}" if view.pmid else None,
                                 f"doi {view.doi}" if view.doi else None, str(view.year) if view.year else None,
                                 view.journal) if x)
    click.echo(ids)
    if query or gene:
        click.echo(f"{view.matches} matches marked")
    for section in view.sections:
        shown = [p for p in section.passages if p.highlights or not matches_only]
        if not shown:
            continue
        heading = section.type + (f" — {section.title}" if section.title and section.title != "Abstract" else "")
        click.echo("\n" + (click.style(heading, bold=True) if color else heading))
        for p in shown:
            click.echo(styled(f"[{p.passage_id}]", False))
            click.echo(paragraph(marked(p.text, p.highlights), color, indent=2))


@click.command()
@click.argument("pmcid")
@data_dir_option
@click.option("--collection", default=DEFAULT_COLLECTION, show_default=True)
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@click.option("--no-color", is_flag=True, help="No bold/colour even on a terminal")
@click.option("--json", "as_json", is_flag=True, help="Print the REST response body (GET /v1/papers/ID/similar)")
def similar(pmcid: str, data_dir: Path | None, collection: str, limit: int, no_color: bool, as_json: bool) -> None:
    """Papers like this one (more-like-this): its significant words against the collection."""
    from search.services import Services

    res = Services.open(settings_for(data_dir)).search.more_like_this(pmcid, collection=collection, limit=limit,
                                                               highlight=_spec())
    if as_json:
        echo_json(res)
        return
    color = _color(no_color)
    terms = ", ".join(t["term"] for t in res.query.get("terms", []))
    click.echo(paragraph(f"Papers like {pmcid}, by: {terms}", False))
    click.echo()
    for i, h in enumerate(res.hits, start=1):
        title = (h.highlight or {}).get("title", [h.title])[0]
        click.echo(paragraph(title, color, indent=5, first=f"{i}."))
        click.echo(paragraph(" · ".join(str(x) for x in (h.pmcid, h.year, h.journal, f"score {h.score:.2f}") if x),
                             False, indent=5))
        click.echo()


@click.command()
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the REST response body (GET /v1/collections)")
def collections(data_dir: Path | None, as_json: bool) -> None:
    """The collections with a published build: papers, passages, build, index size."""
    from search.services import Services

    services = Services.open(settings_for(data_dir))
    found = services.search.collections()
    if as_json:
        echo_json({"engine": services.engine().name, "collections": [c.model_dump() for c in found]})
        return
    rows = [{"name": c.name, "papers": f"{c.papers:,}", "passages": f"{c.passages:,}", "build": c.build or "",
             "size": f"{c.index_bytes / 2**20:.1f} MiB", "ontologies": ", ".join(c.ontologies)} for c in found]
    click.echo(table(rows, [("collection", "name", 30), ("papers", "papers", 10), ("passages", "passages", 12),
                            ("build", "build", 24), ("index", "size", 10), ("ontologies", "ontologies", 30)],
                     _color(False)))
