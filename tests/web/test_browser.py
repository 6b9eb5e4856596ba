"""The workbench in a real browser: Debian's Chromium driven by Playwright for Python (``executable_path``: no
browser download), against ``create_app`` served on loopback over the workbench test site. Each test writes
screenshots to ``FLYSIFT_SCREENSHOTS`` (CI keeps them as artefacts; docs/workbench.md shows them), else to a
temporary directory.

Skipped, with the reason, without the ``browser`` extra or without a Chromium binary (``apt-get install chromium``;
``FLYSIFT_CHROMIUM`` names another one)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from workbench_site import XSS_PAPER, XSS_TITLE, build_site, index_go, parent_child

from search.api.app import create_app

from helpers import LiveServer

playwright_api = pytest.importorskip("playwright.sync_api",
                                     reason="the optional 'browser' extra is not installed (pip install "
                                            "'flysift[browser]')")
CHROMIUM = os.environ.get("FLYSIFT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary: apt-get install chromium (or set "
                                                         "FLYSIFT_CHROMIUM)")
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
SERIOUS = ("serious", "critical")


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    d = Path(os.environ.get("FLYSIFT_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("wb-browser")
    settings = build_site(root, ["GO:0003700", "GO:0043226", "GO:0005622"])
    ont = index_go(settings.data_dir, tmp_path_factory.mktemp("cache"))
    with LiveServer(create_app(settings)) as srv:
        yield {"url": srv.url, "ontology": ont}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def page(browser) -> Iterator[Any]:
    ctx = browser.new_context(viewport=DESKTOP)
    p = ctx.new_page()
    errors: list[str] = []
    p.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    p.console_errors = errors
    yield p
    ctx.close()


def _no_horizontal_scroll(p: Any) -> None:
    overflow = p.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 1, f"the page scrolls sideways by {overflow}px at {p.viewport_size['width']}px"


def test_search_then_open_paper_marks_the_query_word(page, served, shots):
    page.goto(served["url"] + "/?q=Dl")
    assert page.locator("mark.q", has_text="Dl").first.is_visible()
    page.screenshot(path=str(shots / "search.png"), full_page=True)
    page.locator('.hit-title a[href^="/papers/PMC100001"]').click()
    page.wait_for_url("**/papers/PMC100001*")
    assert page.locator(".passage mark.q", has_text="Dl").first.is_visible()
    page.screenshot(path=str(shots / "paper.png"), full_page=False)
    assert not page.console_errors   # no CSP violation, no script error


def test_a_pasted_url_reproduces_the_search_and_back_forward_work(page, served):
    page.goto(served["url"] + "/?q=wing&year_from=2010")
    assert page.input_value("#q") == "wing" and page.input_value("#year_from") == "2010"
    ids = page.locator(".hit .pmcid").all_inner_texts()
    assert set(ids) == {"PMC100004", "PMC100099"}   # the wing papers from 2010 on
    page.goto(served["url"] + "/?q=Dl")
    page.go_back()
    assert page.input_value("#q") == "wing"
    page.go_forward()
    assert page.input_value("#q") == "Dl"


def test_term_page_parent_then_child(page, served, shots):
    parent, term, child = parent_child(served["ontology"])
    page.goto(served["url"] + f"/terms/{term}")
    page.screenshot(path=str(shots / "term.png"), full_page=True)
    page.locator(f'a[data-rel="parent"][href="/terms/{parent}"]').click()
    page.wait_for_url(f"**/terms/{parent}")
    assert parent in page.locator("h1").inner_text()
    page.locator(f'a[data-rel="child"][href="/terms/{term}"]').click()
    page.wait_for_url(f"**/terms/{term}")
    assert child in page.content()


def test_session_timeline_shows_the_budget_refusal(page, served, shots):
    with httpx.Client(base_url=served["url"], timeout=30) as api:
        sid = api.post("/v1/sessions", json={"gene": "Dl", "max_papers": 1, "label": "browser test"}).json()["id"]
        h = {"X-Session-Id": sid}
        api.post("/v1/papers/search", json={"query": "Dl wing", "gene": "Dl"}, headers=h)
        assert api.get("/v1/papers/PMC100001", headers=h).status_code == 200
        assert api.get("/v1/papers/PMC100003", headers=h).status_code == 409
    page.goto(served["url"] + f"/sessions/{sid}")
    refused = page.locator(".ev-refused")
    assert refused.count() == 1 and "budget_exhausted" in refused.inner_text()
    assert page.locator("meter#budget").get_attribute("value") == "1"
    page.screenshot(path=str(shots / "session.png"), full_page=True)


def test_run_review_shows_hits_and_misses(page, served, shots):
    page.goto(served["url"] + "/runs/lexical-2026?gene=FBgn0000463#gene")
    def ids(kind: str) -> set[str]:   # the GO lists (the first comparison)
        return {t.split()[0] for t in page.locator(".cmp-lists").first.locator(f".{kind} li").all_inner_texts()}

    assert ids("hitlist") == {"GO:0003700"} and ids("wronglist") == {"GO:0000000"}
    assert ids("misslist") == {"GO:0043226", "GO:0005622"}
    assert page.locator(".cmp-lists").nth(1).locator(".hitlist li").all_inner_texts() == ["delta ligand"]
    page.screenshot(path=str(shots / "run.png"), full_page=True)
    page.locator('a[href^="/papers/PMC100001?evidence="]').first.click()
    page.wait_for_url("**/papers/PMC100001?evidence=*")
    assert page.locator(".passage.evidence").get_attribute("id") == "PMC100001:2:0"


def test_keyboard_only_search(page, served):
    page.goto(served["url"] + "/terms")
    page.goto(served["url"] + "/")
    page.keyboard.press("/")   # the shortcut focuses the search box
    assert page.evaluate("document.activeElement.id") == "q"
    page.keyboard.type("Su(H)")
    page.keyboard.press("Enter")
    page.wait_for_url("**/?q=Su%28H%29*")
    for _ in range(40):   # Tab to the first result, as a keyboard user would
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.closest('.hit-title') !== null"):
            break
    else:
        raise AssertionError("Tab never reached a result")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"   # focus is visible
    page.keyboard.press("Enter")
    page.wait_for_url("**/papers/PMC*")
    assert page.locator("mark.q").count() > 0


def test_the_xss_title_renders_as_text(page, served):
    for path in ("/?q=Dl", f"/papers/{XSS_PAPER.pmcid}"):
        page.goto(served["url"] + path)
        assert page.evaluate("window.__pwned") is None
    assert page.locator("h1").inner_text().startswith("<script>window.__pwned = 1</script>")
    assert XSS_TITLE[:30] in page.locator("h1").inner_text()


def test_works_with_javascript_off(browser, served):
    ctx = browser.new_context(viewport=DESKTOP, java_script_enabled=False)
    p = ctx.new_page()
    p.goto(served["url"] + "/")
    p.fill("#q", "wing")
    p.press("#q", "Enter")
    p.wait_for_url("**/?q=wing*")
    assert p.locator(".hit").count() >= 1
    p.locator(".hit-title a").first.click()
    p.wait_for_url("**/papers/*")
    assert p.locator("mark.q").count() > 0 and p.locator(".toc a").count() >= 2
    ctx.close()


def test_readable_at_phone_width(browser, served, shots):
    ctx = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    p = ctx.new_page()
    for name, path in (("search", "/?q=wing&gene=Dl"), ("paper", "/papers/PMC100004?q=wing"),
                       ("run", "/runs/lexical-2026"), ("sessions", "/sessions")):
        p.goto(served["url"] + path)
        _no_horizontal_scroll(p)
        if name in ("search", "paper"):
            p.screenshot(path=str(shots / f"{name}-phone.png"), full_page=False)
    ctx.close()


def test_no_serious_accessibility_violations(page, served, shots):
    from axe_playwright_python.sync_playwright import Axe

    parent, term, _ = parent_child(served["ontology"])
    axe = Axe()
    pages = {"home": "/", "search": "/?q=Dl&gene=Dl&explain=1", "passages": "/?q=wing&kind=passages",
             "paper": "/papers/PMC100001?q=Dl", "terms": "/terms?q=transcription", "term": f"/terms/{term}",
             "sessions": "/sessions", "runs": "/runs", "run": "/runs/lexical-2026?gene=FBgn0000463"}
    found = {}
    for name, path in pages.items():
        page.goto(served["url"] + path)
        result = axe.run(page)
        bad = [f"{v['id']} ({v['impact']}): {v['help']}" for v in result.response["violations"]
               if v.get("impact") in SERIOUS]
        if bad:
            found[name] = bad
    page.goto(served["url"] + "/terms?q=transcription")
    page.screenshot(path=str(shots / "terms.png"), full_page=True)
    page.goto(served["url"] + "/")
    page.screenshot(path=str(shots / "home.png"), full_page=False)
    assert found == {}
