"""The workbench pages over HTTP (no browser): what they show, what they escape, who may see what, and the forms
that change state. The real-browser tests are ``test_browser.py``."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from workbench_site import DOI_PAPER, XSS_PAPER, add_concepts, build_site, index_go, parent_child

from search.api.app import create_app
from search.sessions.keys import new_key
from search.sessions.store import SqliteStore
from search.web.security import CSP

from helpers import LiveServer

INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("wb")
    settings = build_site(root, ["GO:0003700", "GO:0043226", "GO:0005622"])
    ont = index_go(settings.data_dir, tmp_path_factory.mktemp("cache"))
    add_concepts(settings)
    return settings, ont


@pytest.fixture(scope="module")
def web(site):
    settings, _ = site
    with LiveServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        yield c


def _csrf(page: str) -> str:
    m = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert m, "no CSRF token in the page"
    return m.group(1)


def _no_inline_code(html: str) -> None:
    assert not INLINE_SCRIPT.search(html), "inline <script> in a page"
    assert " style=" not in html and " onerror=" not in html.replace("onerror=&#34;", "")


# ---- search ---------------------------------------------------------------------------------------------------------

def test_search_marks_the_query_and_links_to_the_paper(web):
    r = web.get("/", params={"q": "Dl"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert '<mark class="q">Dl</mark>' in r.text
    assert 'href="/papers/PMC100001?q=Dl"' in r.text
    assert 'value="Dl"' in r.text   # the box shows the search the URL holds
    assert "PMC100002" not in r.text   # dl (dorsal) is another gene
    _no_inline_code(r.text)


def test_gene_expansion_names_and_policy_toggle(web):
    snap = web.get("/", params={"q": "wing", "gene": "Dl"}).text
    assert 'Gene names added (snapshot): <mark class="g">Dl</mark>, <mark class="g">Delta</mark>' in snap
    assert "policy=full" in snap and "policy=none" in snap.replace("&amp;", "&")
    full = web.get("/", params={"q": "wing", "gene": "Dl", "policy": "full"}).text
    assert "Delta-like" in full and "Delta ligand" in full
    none = web.get("/", params={"q": "wing", "gene": "Dl", "policy": "none"}).text
    assert "No gene names added" in none
    bad = web.get("/", params={"q": "wing", "gene": "NoSuchGene"})
    assert bad.status_code == 422 and 'id="gene-error"' in bad.text


def test_errors_are_shown_next_to_the_box(web):
    r = web.get("/", params={"q": "wing", "year_from": "2010", "year_to": "2000"})
    assert r.status_code == 422
    assert 'aria-invalid="true" aria-describedby="q-error"' in r.text and 'id="q-error"' in r.text
    r = web.get("/", params={"q": "wing", "year_from": "soon"})
    assert r.status_code == 422 and "year_from: a whole number" in r.text
    r = web.get("/", params={"q": "x" * 1001})
    assert r.status_code == 413 or r.status_code == 422
    assert "x" * 200 not in r.text   # an error quotes little of the input


def test_filters_pages_and_passages(web):
    r = web.get("/", params={"q": "wing", "year_from": "2010"})
    assert "PMC100004" in r.text and "PMC100001" not in r.text
    r = web.get("/", params={"q": "wing", "kind": "passages"})
    assert "passage" in r.text and re.search(r'href="/papers/PMC10000\d\?q=wing#PMC10000\d:\d:\d', r.text)
    r = web.get("/", params={"q": "wing", "per": "10", "page": "1"})
    assert r.status_code == 200
    r = web.get("/", params={"q": "Dl", "explain": "1"})
    assert "How the query was read" in r.text and "<code>Dl</code>" in r.text


def test_the_gene_in_title_badge_marks_hits_whose_title_holds_the_query(web):
    def hits(q: str) -> dict[str, str]:
        html = web.get("/", params={"q": q}).text
        return {m.group(1): m.group(2) for m in re.finditer(r'class="pmcid">(PMC\d+)<(.*?)</p>', html, re.S)}

    wing = hits("wing")
    assert '<span class="badge">query in title</span>' in wing["PMC100001"]   # "… in the wing"
    assert '<span class="badge">query in title</span>' in wing["PMC100004"]   # "Wing disc growth"
    dl = hits("Dl")
    assert '<span class="badge">query in title</span>' in dl[XSS_PAPER.pmcid]   # "… Dl & …"
    assert "query in title" not in dl["PMC100001"]   # "Delta and Notch signalling in the wing"

def test_search_renders_hostile_titles_as_text(web):
    r = web.get("/", params={"q": "Dl"})
    assert XSS_PAPER.pmcid in r.text
    assert "<script>window.__pwned" not in r.text and "&lt;script&gt;" in r.text
    assert "<img src=x" not in r.text and "<b>J</b>" not in r.text
    _no_inline_code(r.text)


# ---- paper ----------------------------------------------------------------------------------------------------------

def test_paper_page_sections_passages_and_marks(web):
    r = web.get("/papers/PMC100001", params={"q": "expression", "gene": "Dl"})
    assert r.status_code == 200
    html = r.text
    assert 'href="#s0"' in html and 'href="#s2"' in html   # table of contents: abstract and body sections
    assert 'id="PMC100001:2:0"' in html and "characters 0–" in html
    assert '<mark class="g">Dl</mark>' in html and '<mark class="q">expression</mark>' in html
    assert "https://www.ncbi.nlm.nih.gov/pmc/articles/PMC100001/" in html
    _no_inline_code(html)


def test_paper_page_writes_each_passage_id_twice_and_leaves_the_copy_button_to_the_script(web):
    """Page weight: a CRAFT paper has ~90 passages, and DOI keys are long."""
    html = web.get("/papers/PMC100001").text
    assert html.count("PMC100001:2:0") == 2   # the anchor and the id shown
    assert '<div class="passage" id="PMC100001:2:0"><p>' in html and "<button" not in html.split('class="body"')[1]

def test_paper_page_escapes_everything(web):
    html = web.get(f"/papers/{XSS_PAPER.pmcid}").text
    assert "<script>" not in html.replace('<script src="/static/workbench.js" defer></script>', "")
    assert "&lt;i&gt;Results&lt;/i&gt;" in html and "&lt;/p&gt;&lt;script&gt;x()" in html


def test_paper_page_links_out_to_pmc_pubmed_and_the_doi_escaped(web):
    html = web.get(f"/papers/{XSS_PAPER.pmcid}").text
    assert '<p class="meta">PMC100099 · 2020 · <em>&lt;b&gt;J&lt;/b&gt;</em></p>' in html   # journal and year
    assert 'href="https://www.ncbi.nlm.nih.gov/pmc/articles/PMC100099/">PMC</a>' in html
    assert 'href="https://pubmed.ncbi.nlm.nih.gov/31000099/">PubMed 31000099</a>' in html
    assert 'href="https://doi.org/10.1000/x%22%3E%3Cb%3Ey">DOI 10.1000/x&#34;&gt;&lt;b&gt;y</a>' in html
    assert "PubMed" not in web.get("/papers/PMC100001").text.split("Links out", 1)[1].split("</ul>", 1)[0]

def test_a_paper_keyed_by_its_doi_opens_though_its_key_holds_a_slash(web):
    assert DOI_PAPER.pmcid == "DOI:10.1000/fin.1"
    results = web.get("/", params={"q": "blastema"}).text
    assert 'href="/papers/DOI:10.1000%2Ffin.1?q=blastema"' in results   # the slash escaped in the link
    page = web.get("/papers/DOI:10.1000%2Ffin.1", params={"q": "blastema"})
    assert page.status_code == 200, page.text[:300]
    assert '<mark class="q">blastema</mark>' in page.text and 'id="DOI:10.1000/fin.1:1:0"' in page.text
    assert 'href="/papers/DOI:10.1000%2Ffin.1/similar">Find similar papers</a>' in page.text
    assert web.get("/papers/DOI:10.1000%2Ffin.1/similar").status_code == 200
    assert web.get("/papers/DOI:10.1000%2Ffin.1/supplements/1").status_code == 404   # it has none
    assert web.get("/papers/DOI:10.1000%2Fnone").status_code == 404

def test_paper_page_finds_the_evidence_passage(web):
    html = web.get("/papers/PMC100001", params={"evidence": "Loss of Dl abolishes E(spl)m8-HLH expression"}).text
    assert 'is in passage <a href="#PMC100001:2:0">' in html and 'class="passage evidence" id="PMC100001:2:0"' in html


def test_missing_paper_is_a_404_page(web):
    r = web.get("/papers/PMC999999")
    assert r.status_code == 404 and "text/html" in r.headers["content-type"] and "not found" in r.text


# ---- terms ----------------------------------------------------------------------------------------------------------

def test_term_search_and_term_page_link_parents_and_children(web, site):
    _, ont = site
    parent, term, child = parent_child(ont)
    name = ont.name_of(term)
    r = web.get("/terms", params={"q": name, "ontology": "go"})
    assert r.status_code == 200 and f'href="/terms/{term}"' in r.text
    page = web.get(f"/terms/{term}").text
    assert f'href="/terms/{parent}" data-rel="parent"' in page and f'href="/terms/{child}" data-rel="child"' in page
    assert web.get("/terms/GO:9999999").status_code == 404


def test_term_page_shows_obsolete_replacements_alt_ids_and_synonym_scopes(web):
    page = web.get("/terms/GO:0000005").text
    assert "Obsolete." in page and 'href="/terms/GO:0003700"' in page and 'href="/terms/GO:0140110"' in page
    assert "ribosomal chaperone <span class=\"badge\">exact</span>" in page
    alt = web.get("/terms/GO:0042051").text
    assert "is an alternative id of" in alt


# ---- security headers and static files -------------------------------------------------------------------------------

def test_security_headers_and_static_files(web):
    r = httpx.get(str(web.base_url) + "/")   # a browser without cookies yet: it gets the CSRF cookie
    assert r.headers["content-security-policy"] == CSP and "unsafe-inline" not in CSP
    assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
    assert "httponly" in r.headers["set-cookie"].lower() and "samesite=strict" in r.headers["set-cookie"].lower()
    assert web.get("/static/workbench.css").status_code == 200
    assert web.get("/static/..%2Fpages.py").status_code == 404
    assert web.get("/static/pages.py").status_code == 404


def test_page_weight_is_under_150_kb(web):
    html = web.get("/", params={"q": "wing", "per": "50"}).content
    paper = web.get("/papers/PMC100004", params={"q": "wing"}).content
    assets = len(web.get("/static/workbench.css").content) + len(web.get("/static/workbench.js").content)
    assert max(len(html), len(paper)) + assets < 150_000


# ---- sessions (auth off: the local team) ----------------------------------------------------------------------------

def test_session_audit_shows_the_refusal_budget_and_submission(web):
    s = web.post("/v1/sessions", json={"gene": "Dl", "max_papers": 1, "label": "<b>run</b>"}).json()
    h = {"X-Session-Id": s["id"]}
    assert web.post("/v1/papers/search", json={"query": "Dl wing", "gene": "Dl"}, headers=h).status_code == 200
    assert web.get("/v1/papers/PMC100001", headers=h).status_code == 200
    assert web.get("/v1/papers/PMC100003", headers=h).status_code == 409   # the budget refuses a second paper
    sub = {"gene_id": "FBgn0000463", "gene_symbol": "Dl",
           "task1_function": [{"go_id": "GO:0003700", "qualifier": "involved_in", "aspect": "P",
                               "is_negated": False, "evidence": {"pmcid": "PMC100001", "text": "Loss of Dl"}}],
           "task2_expression": [], "task3_synonyms": {"fullname_synonyms": [], "symbol_synonyms": []}}
    assert web.post(f"/v1/sessions/{s['id']}/submission", json=sub).status_code == 200
    listing = web.get("/sessions").text
    assert f'href="/sessions/{s["id"]}"' in listing and "&lt;b&gt;run&lt;/b&gt;" in listing
    html = web.get(f"/sessions/{s['id']}").text
    assert 'class="ev ev-read ev-error ev-refused"' in html and "budget_exhausted" in html
    assert re.search(r'<meter id="budget" min="0" max="1"[^>]* value="1"', html)
    assert "1 refused call" in html
    assert 'href="/papers/PMC100001?evidence=Loss+of+Dl"' in html
    # the reasons of `flysift coverage` (search.flyaoc.coverage), ranked again through the service
    assert "Coverage of the cited papers" in html and "3 papers cited by curators for Dl" in html
    assert 'class="reason-read_and_cited"><td><a href="/papers/PMC100001">' in html   # read, cited as evidence
    assert re.search(r'class="reason-surfaced_not_read"><td><a href="/papers/PMC100004">PMC100004</a></td>\s*'
                     r'<td>2015</td>[^\n]*rank 3 in search_papers call 1 \(&#39;Dl wing&#39;\)', html)
    assert 'class="reason-never_retrieved"><td><a href="/papers/PMC100003">' in html
    _no_inline_code(html)


def test_hidden_terms_stay_hidden_in_the_audit(web):
    s = web.post("/v1/sessions", json={"gene": "Dl", "hidden_terms": {"ids": ["GO:0003700"]}}).json()
    sub = {"gene_id": "FBgn0000463", "gene_symbol": "Dl", "task2_expression": [],
           "task1_function": [{"go_id": "GO:0003700", "qualifier": "involved_in", "aspect": "P", "is_negated": False},
                              {"go_id": "GO:0043226", "qualifier": "involved_in", "aspect": "P", "is_negated": False}],
           "task3_synonyms": {"fullname_synonyms": [], "symbol_synonyms": []}}
    web.post(f"/v1/sessions/{s['id']}/submission", json=sub)
    html = web.get(f"/sessions/{s['id']}").text
    hidden_name = web.get("/v1/terms/GO:0003700").json()["term"]["name"]
    shown_name = web.get("/v1/terms/GO:0043226").json()["term"]["name"]
    assert "<code>GO:0003700</code> <span class=\"badge warn\">hidden from this session</span>" in html
    assert f">{hidden_name}<" not in html and f"</a> {shown_name}</td>" in html


def test_closing_a_session_needs_the_csrf_token(web):
    s = web.post("/v1/sessions", json={"gene": "Dl"}).json()
    page = web.get(f"/sessions/{s['id']}").text
    assert web.post(f"/sessions/{s['id']}/close", data={"csrf": "0" * 64}).status_code == 403
    assert web.get(f"/v1/sessions/{s['id']}").json()["status"] == "open"
    r = web.post(f"/sessions/{s['id']}/close", data={"csrf": _csrf(page)}, follow_redirects=False)
    assert r.status_code == 303
    assert web.get(f"/v1/sessions/{s['id']}").json()["status"] == "closed"


# ---- runs -----------------------------------------------------------------------------------------------------------

def test_run_review_shows_hits_misses_evidence_and_coverage(web):
    listing = web.get("/runs").text
    assert 'href="/runs/lexical-2026"' in listing and "not-a-run" not in listing
    html = web.get("/runs/lexical-2026").text
    assert ">1 / 2 / 1<" in html   # GO: 1 hit, 2 misses, 1 wrong id
    assert ">1 / 1 / 1<" in html   # synonyms: delta ligand found, dl-1 missed, notch ligand wrong (DL2: not in corpus)
    gene = web.get("/runs/lexical-2026", params={"gene": "FBgn0000463"}).text
    assert ('class="hitlist"><li><a href="/terms/GO:0003700">GO:0003700</a> DNA-binding transcription factor '
            'activity</li>') in gene
    assert "GO:0043226" in gene and "GO:0000000" in gene
    assert "<li>delta ligand</li>" in gene and "<li>dl-1</li>" in gene and "<li>notch ligand</li>" in gene
    assert "dl2" not in gene
    assert 'href="/papers/PMC100001?evidence=Loss+of+Dl' in gene
    # without a report the rule runs on the run's trace: every gene's table cell, the chosen gene ranked
    assert "<code>surfaced_not_read</code> 1<br><code>read_and_cited</code> 1<br><code>not_ranked</code> 1" in html
    assert 'class="reason-read_and_cited"><td><a href="/papers/PMC100001">' in gene
    assert "rank 2 in search_papers call 1 (&#39;Dl&#39;)" in gene
    assert 'class="reason-never_retrieved"><td><a href="/papers/PMC100004">' in gene


def test_run_names_are_looked_up_never_joined(web, site, tmp_path):
    settings, _ = site
    outside = tmp_path / "outside"
    (outside / "predictions").mkdir(parents=True)
    (settings.runs_dir / "linked").symlink_to(outside)
    for name in ("not-a-run", "%2E%2E", "linked", "%2E%2E%2Fdata", "lexical-2026%2F..%2F..", "x" * 300):
        r = web.get(f"/runs/{name}")
        assert r.status_code == 404, name
    assert "linked" not in web.get("/runs").text
    assert web.get("/runs/lexical-2026", params={"gene": "../../etc/passwd"}).status_code == 404


# ---- auth on: sign-in, cookie, CSRF, team isolation -----------------------------------------------------------------

@pytest.fixture(scope="module")
def secured(site, tmp_path_factory):
    settings, _ = site
    data = tmp_path_factory.mktemp("secured")
    for f in settings.data_dir.iterdir():
        if f.is_dir():
            (data / f.name).symlink_to(f)
        elif f.name not in ("sessions.sqlite", "cursor_secret"):
            (data / f.name).write_bytes(f.read_bytes())
    store = SqliteStore(data / "sessions.sqlite")
    keys = {}
    for team, name in (("lab1", "a"), ("lab2", "b"), ("lab2", "revoked")):
        if team not in store.list_teams():
            store.create_team(team)
        keys[name], rec = new_key(team, ["agent"])
        store.add_key(rec)
        if name == "revoked":
            store.revoke_key(rec.id)
    app = create_app(settings.model_copy(update={"data_dir": data, "auth": True}))
    with LiveServer(app) as srv:
        yield srv.url, keys, store


@contextmanager
def _signed_in(url: str, key: str) -> Iterator[httpx.Client]:
    c = httpx.Client(base_url=url, timeout=30)
    page = c.get("/signin").text
    r = c.post("/signin", data={"csrf": _csrf(page), "key": key, "next": "/sessions"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/sessions", r.text
    cookie = [v for k, v in r.headers.multi_items() if k == "set-cookie" and v.startswith("flysift_auth=")][0]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower() and key not in cookie
    try:
        yield c
    finally:
        c.close()


def test_pages_need_a_sign_in_when_auth_is_on(secured):
    url, _, _ = secured
    with httpx.Client(base_url=url, timeout=30) as c:
        r = c.get("/", params={"q": "Dl"}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/signin?next=%2F%3Fq%3DDl"
        assert c.get("/signin").status_code == 200
        c.cookies.set("flysift_auth", "eyJrIjoiYWJjIn0.forged.sig")
        forged = c.get("/", params={"q": "Dl"}, follow_redirects=False)
        assert forged.status_code == 303


def test_sign_in_sets_a_cookie_and_never_shows_the_key(secured):
    url, keys, _ = secured
    with _signed_in(url, keys["a"]) as c:
        r = c.get("/", params={"q": "Dl"})
        assert r.status_code == 200 and keys["a"] not in r.text and "team <strong>lab1</strong>" in r.text
        assert c.get("/v1/stats").status_code == 401   # the cookie is for pages; the API takes Bearer keys


def test_bad_keys_and_missing_csrf_are_refused(secured):
    url, keys, _ = secured
    with httpx.Client(base_url=url, timeout=30) as c:
        page = c.get("/signin").text
        bad = c.post("/signin", data={"csrf": _csrf(page), "key": "fsk_000000000000_" + "x" * 30})
        assert bad.status_code == 401 and "Unknown API key" in bad.text
        revoked = c.post("/signin", data={"csrf": _csrf(page), "key": keys["revoked"]})
        assert revoked.status_code == 401 and "revoked" in revoked.text
        no_csrf = c.post("/signin", data={"key": keys["a"]})
        assert no_csrf.status_code == 403 and "flysift_auth" not in no_csrf.headers.get("set-cookie", "")
        cross = c.post("/signin", data={"csrf": _csrf(page), "key": keys["a"]},
                       headers={"Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403
        offsite = c.post("/signin", data={"csrf": _csrf(page), "key": keys["a"], "next": "//evil.example/x"},
                         follow_redirects=False)
        assert offsite.status_code == 303 and offsite.headers["location"] == "/"


def test_another_teams_session_is_a_404_page(secured):
    url, keys, _ = secured
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {keys['b']}"}) as api:
        theirs = api.post("/v1/sessions", json={"gene": "Dl"}).json()["id"]
    with _signed_in(url, keys["a"]) as c:
        assert c.get(f"/sessions/{theirs}").status_code == 404
        assert theirs not in c.get("/sessions").text
    with _signed_in(url, keys["b"]) as c:
        assert c.get(f"/sessions/{theirs}").status_code == 200
        assert theirs in c.get("/sessions").text


def test_a_revoked_key_ends_its_sign_in(secured):
    url, _, store = secured
    key, rec = new_key("lab1", ["agent"])
    store.add_key(rec)
    with _signed_in(url, key) as c:
        assert c.get("/sessions").status_code == 200
        store.revoke_key(rec.id)
        r = c.get("/sessions", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/signin")


def test_sign_out_needs_csrf_and_clears_the_cookie(secured):
    url, keys, _ = secured
    with _signed_in(url, keys["a"]) as c:
        page = c.get("/sessions").text
        assert c.post("/signout", data={}).status_code == 403
        r = c.post("/signout", data={"csrf": _csrf(page)}, follow_redirects=False)
        assert r.status_code == 303 and 'flysift_auth=""' in r.headers["set-cookie"]


def test_templates_and_static_ship_with_the_package():
    root = Path(__file__).parents[2] / "search" / "web"
    assert (root / "templates" / "base.html").exists() and (root / "static" / "workbench.js").exists()


def test_serve_banner_names_the_workbench(site):
    from search.cli.main import serve_banner

    settings, _ = site
    text = serve_banner(settings, "127.0.0.1", 8270, 1, False)
    assert "workbench: http://127.0.0.1:8270/ (search, papers, terms, sessions, runs)" in text


def test_a_bug_is_an_html_500_page_without_its_traceback(web, monkeypatch):
    from search.web import reading

    def broken(ctx, form):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(reading, "run_search", broken)
    r = web.get("/", params={"q": "Dl"})
    assert r.status_code == 500 and "text/html" in r.headers["content-type"]
    assert "internal_error" in r.text and "RuntimeError" in r.text and "secret internals" not in r.text


def test_timeline_links_name_papers_passages_supplements_and_terms():
    from search.web.audit import link_for as _link_for

    assert _link_for("PMC1") == "/papers/PMC1"
    assert _link_for("PMC1:2:0.1") == "/papers/PMC1#PMC1%3A2%3A0.1"
    assert _link_for("PMC1:S2.0:3") == "/papers/PMC1/supplements/2?part=0"
    assert _link_for("GO:0007219") == "/terms/GO%3A0007219"
    assert _link_for("something else") == ""


def test_run_review_leaves_out_tasks_nobody_predicts_or_expects(web):
    html = web.get("/runs/lexical-2026").text
    assert "GO hit / miss / wrong" in html and "Synonyms hit / miss / wrong" in html
    assert "Anatomy hit / miss / wrong" not in html   # no expression predicted, none in the ground truth


def test_run_review_shows_the_reasons_of_flysift_coverage(web, site):
    """The report `flysift coverage --run-dir RUN --out RUN/coverage` writes (the one home of the reasons, run here
    for real against the served index) is shown per gene and per cited paper."""
    import shutil

    from click.testing import CliRunner

    from eval.cli import coverage_cmd

    settings, _ = site
    run = settings.runs_dir / "covered"
    shutil.copytree(settings.runs_dir / "lexical-2026", run)
    res = CliRunner().invoke(coverage_cmd, ["--ground-truth", str(settings.ground_truth), "--run-dir", str(run),
                                            "--url", str(web.base_url), "--out", str(run / "coverage")])
    assert res.exit_code == 0, res.output
    html = web.get("/runs/covered").text
    assert "Coverage reasons from <code>flysift coverage</code>" in html and "newer than the report" not in html
    assert "<code>read_and_cited</code> 1" in html
    gene = web.get("/runs/covered", params={"gene": "FBgn0000463"}).text
    assert 'class="reason-read_and_cited"><td><a href="/papers/PMC100001">' in gene
    assert "Delta and Notch signalling in the wing" in gene   # the report's title of the paper
    assert re.search(r'class="reason-surfaced_not_read"><td><a href="/papers/PMC100003">PMC100003</a></td>\s*'
                     r'<td>2010</td>[^\n]*rank 2 in search_papers call 1', gene)
    assert '<code>never_retrieved</code>' in gene
    later = (run / "coverage" / "coverage.json").stat().st_mtime + 60
    os.utime(run / "predictions" / "FBgn0000463.json", (later, later))   # a resumed run after the report
    assert "Some predictions are newer than the report" in web.get("/runs/covered").text
    (run / "coverage" / "coverage.json").write_text('{"run": {"genes": "<script>"}}')
    broken = web.get("/runs/covered")
    assert broken.status_code == 200 and "is not a report of" in broken.text and "<script>\"" not in broken.text


def test_paper_page_marks_ontology_terms_on_request(web):
    plain = web.get("/papers/PMC100001").text
    assert 'class="t"' not in plain.split("<main")[1].replace('<a class="t" href="/terms">', "")
    html = web.get("/papers/PMC100001", params={"q": "nucleus", "terms": "1"}).text
    # "nucleus" is a GO term of the fixture ontology: the term link wins over the query mark
    assert '<a class="t" href="/terms/GO:0005634" title="GO:0005634 nucleus">nucleus</a>' in html
    assert '<mark class="q">nucleus</mark>' not in html
    assert "Hide ontology terms" in html


# ---- the query language, facets, fragments, exports, similar papers (#26 in the pages) -------------------------------

def test_search_reads_the_query_language_by_default(web):
    assert "PMC100001" not in web.get("/", params={"q": "wing -Dl"}).text   # -Dl leaves the Delta paper out
    plain = web.get("/", params={"q": "wing -Dl", "syntax": "plain"}).text
    assert 'class="pmcid">PMC100001<' in plain   # plain text: the - is a character, not an operator
    assert 'value="plain" checked' in plain
    titled = web.get("/", params={"q": "title:Wing"}).text
    assert 'class="pmcid">PMC100004<' in titled and 'class="pmcid">PMC100099<' not in titled


def test_a_query_syntax_error_is_shown_next_to_the_box_with_its_position_and_hint(web):
    r = web.get("/", params={"q": 'wing "margin'})
    assert r.status_code == 422 and 'aria-describedby="q-error"' in r.text
    err = r.text.split('id="q-error"', 1)[1].split("</p>", 1)[0]
    assert "<strong>query_syntax</strong>" in err and "(character 6)" in err and "&#34;margin</code>" in err
    assert "Close the phrase with a second" in err   # the hint
    assert 'href="/?q=wing+%22margin&amp;syntax=plain"' in err   # one click to the plain reading
    assert web.get("/", params={"q": 'wing "margin', "syntax": "plain"}).status_code == 200


def test_facets_count_years_and_sections_as_links(web):
    html = web.get("/", params={"q": "wing"}).text
    facets = html.split('<aside class="facets"', 1)[1].split("</aside>", 1)[0]
    assert '<a href="/?q=wing&amp;year_from=2015&amp;year_to=2015">2015</a> <span class="count">1</span>' in facets
    assert '<a href="/?q=wing&amp;section=RESULTS">RESULTS</a> <span class="count">3</span>' in facets
    narrowed = web.get("/", params={"q": "wing", "section": "RESULTS", "year_from": "2015", "year_to": "2015"}).text
    assert '<strong aria-current="true">2015</strong>' in narrowed and "Clear the filters" in narrowed


def test_hits_show_the_services_highlight_fragments_and_passages_their_papers_titles(web):
    html = web.get("/", params={"q": "wing"}).text
    assert '<a href="/papers/PMC100004?q=wing"><mark class="q">Wing</mark> disc growth</a>' in html   # the title
    assert ('<span class="where">abstract</span>Growth of the <mark class="q">wing</mark> imaginal disc depends on '
            'morphogens.') in html
    assert '<a class="where" href="/papers/PMC100099?q=wing#PMC100099:1:0">passage PMC100099:1:0</a>' in html
    passages = web.get("/", params={"q": "Su(H)", "kind": "passages"}).text
    assert '#PMC100003:1:0">Suppressor of Hairless targets</a>' in passages
    assert "<mark class=\"q\">Su(H)</mark>; Hairless complexes repress targets." in passages


def test_fragments_are_never_html_from_the_service():
    from search.web.render import CLOSE, OPEN, fragment, whole

    tagged = f"<b>{OPEN}Dl{CLOSE}</b> & {CLOSE}x{OPEN}y"   # a stray tag in the text is dropped
    assert str(fragment(tagged)) == '&lt;b&gt;<mark class="q">Dl</mark>&lt;/b&gt; &amp; xy'
    assert str(whole([f"{OPEN}Wing{CLOSE} disc"], "Wing disc growth")) == "Wing disc growth"   # a cut title: plain


def test_export_links_and_the_cookie_authenticated_export_route(web):
    html = web.get("/", params={"q": "Su(H)", "gene": "Dl"}).text
    assert 'href="/export?q=Su%28H%29&amp;gene=Dl&amp;format=ris"' in html and ">BibTeX</a>" in html
    ris = web.get("/export", params={"q": "Su(H)", "format": "ris"})
    assert ris.status_code == 200 and ris.headers["content-type"].startswith("application/x-research-info-systems")
    assert ris.headers["content-disposition"] == 'attachment; filename="flysift-papers.ris"'
    assert "TI  - Suppressor of Hairless targets\nAU  - Bray, Sarah J.\nAU  - FlyBase Consortium\n" in ris.text
    bib = web.get("/export", params={"q": "Su(H)", "format": "bibtex", "kind": "passages"}).text
    assert "author = {Bray, Sarah J. and {FlyBase Consortium}}" in bib and "note = {passage PMC100003:" in bib
    csv_text = web.get("/export", params={"q": "wing", "format": "csv", "year_from": "2010", "limit": "1"}).text
    assert csv_text.splitlines()[0].startswith("rank,pmcid") and len(csv_text.splitlines()) == 2
    bad = web.get("/export", params={"q": '"wing', "format": "csv"})
    assert bad.status_code == 422 and "text/html" in bad.headers["content-type"] and "query_syntax" in bad.text
    assert web.get("/export", params={"q": "wing", "format": "xls"}).status_code == 422


def test_similar_papers_page(web):
    html = web.get("/papers/PMC100004/similar").text
    assert "Papers like" in html and 'class="pmcid">PMC100001<' in html and 'class="pmcid">PMC100004<' not in html
    assert '<span class="term-weight">cells</span>' in html
    assert 'href="/papers/PMC100004/similar">Find similar papers</a>' in web.get("/papers/PMC100004").text
    assert web.get("/papers/PMC999999/similar").status_code == 404


# ---- one marking of a paper (BrowseService.paper_view), authors ------------------------------------------------------

def test_the_paper_page_is_the_services_paper_view():
    """The pages mark a paper through BrowseService.paper_view alone: no highlighter of their own."""
    root = Path(__file__).parents[2] / "search" / "web"
    source = "\n".join(p.read_text() for p in root.glob("*.py"))
    assert "Highlighter" not in source and "split_passages" not in source


def test_paper_page_shows_authors(web):
    html = web.get("/papers/PMC100003").text
    assert '<p class="authors"><span class="vh">Authors: </span>Bray, Sarah J.; FlyBase Consortium</p>' in html
    assert 'class="authors"' not in web.get("/papers/PMC100001").text   # none known: nothing shown


def test_paper_page_terms_from_the_concept_index_or_the_recogniser(web):
    concepts = web.get("/papers/PMC100001", params={"terms": "1"}).text
    assert "of the collection's concept index" in concepts
    assert '<a class="t" href="/terms/GO:0005634" title="GO:0005634 nucleus">nucleus</a>' in concepts
    plain = web.get("/papers/PMC100001", params={"terms": "1", "collection": "plain"}).text
    assert "found by the term recogniser" in plain and 'href="/terms/GO:0005634"' in plain


# ---- term pages: concept search, else the name as a phrase ----------------------------------------------------------

def test_term_page_lists_what_mentions_the_term_by_concept_search(web):
    html = web.get("/terms/GO:0043231").text   # intracellular membrane-bounded organelle: nucleus is below it
    assert "Concept search <code>term:GO:0043231</code>" in html
    assert '<h3>Papers (1)</h3>' in html and 'href="/papers/PMC100001?terms=1">Delta and Notch' in html
    assert "“nucleus” <a href=\"/terms/GO:0005634\">GO:0005634</a>" in html   # the descendant it matched
    assert '<a class="t" href="/terms/GO:0005634" title="GO:0005634 nucleus">nucleus</a>.</p>' in html
    assert "#PMC100001:1:0" in html


def test_term_page_without_a_concept_index_searches_the_name_and_says_so(web):
    html = web.get("/terms/GO:0005634", params={"collection": "plain"}).text
    assert "no concept index for go" in html and "phrase search <code>&#34;nucleus&#34;</code>" in html
    assert '<mark class="q">nucleus</mark>' in html and 'collection=plain' in html


# ---- exports with auth on: the cookie, not a Bearer key --------------------------------------------------------------

def test_export_with_auth_on_needs_the_sign_in_cookie(secured):
    url, keys, _ = secured
    with httpx.Client(base_url=url, timeout=30) as anon:
        r = anon.get("/export", params={"q": "wing", "format": "csv"}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/signin?next=%2Fexport")
        assert anon.get("/v1/papers/search", params={"query": "wing", "format": "csv"}).status_code == 401
    with _signed_in(url, keys["a"]) as c:
        r = c.get("/export", params={"q": "wing", "format": "csv"})
        assert r.status_code == 200 and r.text.startswith("rank,pmcid") and "PMC100004" in r.text
