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
from workbench_site import XSS_PAPER, build_site, index_go, parent_child

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


def test_paper_page_escapes_everything(web):
    html = web.get(f"/papers/{XSS_PAPER.pmcid}").text
    assert "<script>" not in html.replace('<script src="/static/workbench.js" defer></script>', "")
    assert "&lt;i&gt;Results&lt;/i&gt;" in html and "&lt;/p&gt;&lt;script&gt;x()" in html


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
    assert "Coverage of the cited papers" in html and "reason-read" in html and "reason-never_surfaced" in html
    assert re.search(r'reason-surfaced_not_read.*\n.*PMC100004', html)
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
    assert "reason-read" in gene and "reason-surfaced_not_read" in gene and "reason-never_surfaced" in gene


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
    from search.web import pages

    def broken(ctx, form):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(pages, "run_search", broken)
    r = web.get("/", params={"q": "Dl"})
    assert r.status_code == 500 and "text/html" in r.headers["content-type"]
    assert "internal_error" in r.text and "RuntimeError" in r.text and "secret internals" not in r.text


def test_timeline_links_name_papers_passages_supplements_and_terms():
    from search.web.pages import _link_for

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
                     r'<td>2010</td>[^\n]*rank 2 in search_papers call #1', gene)
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
