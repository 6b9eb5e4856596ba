"""Issue #14 item 3: /docs and /redoc work offline. The pages reference only the service's own assets (no CDN), and
every asset they reference, and the OpenAPI document, is served by the service itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from search.api.app import create_app
from search.core.config import Settings

REF = re.compile(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""")


@pytest.fixture
def http(data_dir: Path) -> TestClient:
    return TestClient(create_app(Settings(data_dir=data_dir)))


def _refs(html: str) -> list[str]:
    return [r for r in REF.findall(html) if not r.startswith(("#", "data:"))]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_every_asset_from_the_service(http: TestClient, page: str) -> None:
    res = http.get(page)
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/html")
    refs = _refs(res.text)
    assert refs, "the page references its script"
    assert not re.search(r"https?://", res.text), "no CDN or other outside URL in the page"
    assert "/openapi.json" in refs
    for ref in refs:
        assert ref.startswith("/"), ref
        got = http.get(ref)
        assert got.status_code == 200, ref
        assert len(got.content) > 100, ref
    js = [r for r in refs if r.endswith(".js")]
    assert js and all("javascript" in http.get(r).headers["content-type"] for r in js)


def test_docs_assets_are_a_fixed_list_of_names(http: TestClient) -> None:
    assert http.get("/docs/assets/swagger-ui.css").headers["content-type"].startswith("text/css")
    for bad in ("/docs/assets/core.py", "/docs/assets/..%2F__init__.py", "/docs/assets/%2e%2e"):
        assert http.get(bad).status_code in (400, 404), bad


def test_docs_stay_reachable_with_auth_on(data_dir: Path) -> None:
    http = TestClient(create_app(Settings(data_dir=data_dir, auth=True)))
    assert http.get("/docs").status_code == 200
    assert http.get("/docs/assets/swagger-ui-bundle.js").status_code == 200
