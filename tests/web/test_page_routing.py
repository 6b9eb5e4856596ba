"""The pages are routed in front of the API (search.web.Pages): a page is found without trying every API route, an
API request never reaches a page, and the routing keeps Starlette's answers (405 for a wrong method, 404 for a path
nobody serves) and the route templates the access log and the metrics are labelled with."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from search.api.app import create_app
from search.core.config import Settings
from search.web import Pages

from helpers import PAPERS, build_index


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    data = tmp_path_factory.mktemp("routing") / "data"
    build_index(data, PAPERS)
    return data


@pytest.fixture
def app(data):
    return create_app(Settings(data_dir=data))


def test_the_pages_come_first_and_hold_every_page(app):
    first = app.router.routes[0]
    assert isinstance(first, Pages)
    paths = {r.path for r in first.routes}
    assert {"/", "/papers/{pmcid:path}", "/terms/{term_id}", "/sessions/{session_id}", "/runs/{name}",
            "/static/{name}"} <= paths
    # no page is left among the API's routes
    assert not paths & {getattr(r, "path", None) for r in app.router.routes[1:]}


def test_pages_and_api_answer_as_before(app):
    pmcid = PAPERS[0].pmcid
    with TestClient(app) as c:
        page = c.get(f"/papers/{pmcid}")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        api = c.get(f"/v1/papers/{pmcid}")
        assert api.status_code == 200 and api.headers["content-type"].startswith("application/json")
        assert c.get("/static/workbench.css").status_code == 200
        assert c.get("/openapi.json").status_code == 200 and c.get("/docs").status_code == 200
        # a wrong method on a page is 405 (a partial match), not a fall-through to the API's 404
        assert c.post("/terms").status_code == 405
        # a path under /v1/ that no API route takes is the API's JSON 404, never a page
        missing = c.get("/v1/no/such/route")
        assert missing.status_code == 404 and missing.headers["content-type"].startswith("application/json")
        assert c.get("/no/such/page").status_code == 404


def test_metrics_label_a_page_by_its_route_template(app):
    with TestClient(app) as c:
        assert c.get(f"/papers/{PAPERS[1].pmcid}").status_code == 200
        assert c.get(f"/papers/{PAPERS[2].pmcid}").status_code == 200
        assert c.get("/static/workbench.js").status_code == 200
        text = c.get("/metrics").text
    lines = [x for x in text.splitlines() if x.startswith("flysift_requests_total{") and 'method="GET"' in x]
    assert any('route="/papers/{pmcid}"' in x and x.endswith(" 2.0") for x in lines), lines
    assert any('route="/static/{name}"' in x and x.endswith(" 1.0") for x in lines), lines
    assert not any('route="unmatched"' in x for x in lines), lines
    assert not any(PAPERS[1].pmcid in x for x in lines)   # a label per template, never per URL
