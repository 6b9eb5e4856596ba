"""``flysift terms "query" --ontology go [--aspect P]``: term search from the command line."""

from __future__ import annotations

import os
from pathlib import Path

import click

from search.cli.options import data_dir_option, echo_json, print_table, settings_for
from search.text.term_search import ID_QUERY_RE


@click.command("terms")
@click.argument("query")
@click.option("--ontology", "-o", default="go", show_default=True, help="go, fbbt, fbdv or another indexed name")
@click.option("--aspect", "-a", help="GO aspect: P, F or C")
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@click.option("--hidden", help="Hidden set name (flyaoc) or comma-separated ids to leave out")
@click.option("--hidden-descendants", is_flag=True, help="Also hide every descendant of the hidden ids")
@click.option("--mode", type=click.Choice(["bm25", "dense", "hybrid"]), default=None,
              help="bm25: the lexical ranking; dense/hybrid need the term encoder (flysift train term-encoder) or "
                   "the ontology's dense term index [default: hybrid with a term encoder, else bm25]")
@click.option("--mf-activity-only", is_flag=True,
              help="GO: molecular functions only when the query names an activity (else none: abstain)")
@click.option("--resolve", is_flag=True, help="Rank terms for a description (the resolver) instead of searching")
@click.option("--json", "as_json", is_flag=True,
              help="Print the REST response body (GET /v1/terms/search, or /v1/terms/resolve with --resolve)")
@data_dir_option
def terms(query: str, ontology: str, aspect: str | None, limit: int, hidden: str | None, hidden_descendants: bool,
          mode: str | None, mf_activity_only: bool, resolve: bool, as_json: bool, data_dir: Path | None) -> None:
    """Search ontology terms by name, synonym, definition or id."""
    # one query in a short-lived process: OpenBLAS's thread pool (started when numpy is imported) costs ~60 ms of CPU
    # and nothing here multiplies matrices large enough to use it
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from search.services import Services

    svc = Services.open(settings_for(data_dir)).terms
    if resolve:
        found = svc.resolve_description(query, ontology, aspect=aspect, limit=limit, hidden=hidden,
                                        hidden_descendants=hidden_descendants)
        if as_json:
            echo_json(found)
            return
        print_table([r.model_dump() for r in found.results],
                    [("id", "id", 14), ("name", "name", 50), ("matched label", "matched", 50), ("score", "score", 7)])
        return
    res = svc.search(ontology, query, aspect=aspect, limit=limit, hidden=hidden, hidden_descendants=hidden_descendants,
                     mode=mode, mf_activity_only=mf_activity_only)
    if as_json:
        echo_json(res)
        return
    asked = ID_QUERY_RE.fullmatch(query)
    if asked and res.hits and res.hits[0].id != asked.group(1):
        # found by one of its alternative ids (the term index keeps them): say so, as GET /v1/terms/{id} does
        click.echo(f"{asked.group(1)} is an alternative id of {res.hits[0].id} ({res.hits[0].name}).")
    rows = [{**h.model_dump(), "score": f"{h.score:.2f}", "matched_synonym": h.matched_synonym or "",
             "aspect": h.aspect or "", "obsolete": "obsolete" if h.obsolete else ""} for h in res.hits]
    print_table(rows, [("id", "id", 14), ("aspect", "aspect", 6), ("name", "name", 45),
                       ("matched synonym", "matched_synonym", 30), ("score", "score", 7),
                       ("definition", "definition", 60), ("status", "obsolete", 8)])
