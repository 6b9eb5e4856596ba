"""Shared test data and helpers, the one module tests import them from (``from helpers import PAPERS, …``).

- ``PAPERS`` / ``build_index``: a small hand-written corpus with the hard gene-symbol cases, indexed embedded;
- ``LiveServer``: the API on a real loopback port (the HTTP agents use);
- ``DOCS`` / ``QUERIES`` / ``QRELS`` / ``write_beir``: a tiny BEIR collection for the IR evaluation;
- ``ClusterNode`` / ``find_cluster_node``: the real Elasticsearch/OpenSearch node of the tests marked ``cluster``.

Fixtures built on these live in ``conftest.py``, so tests never import a fixture.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from search.core.models import Paper, Section
from search.engines import open_local
from search.engines.embedded.engine import EmbeddedEngine
from search.ontology.service import TermService
from search.text.passages import split_passages

# ---- the fixture corpus -------------------------------------------------------------------------------------------
PAPERS = [
    Paper(pmcid="PMC100001", year=2001, journal="Dev Biol", title="Delta and Notch signalling in the wing",
          abstract="Dl activates N in wing margin cells.",
          sections=[Section(type="INTRO", paragraphs=["The ligand Dl binds the receptor N. Su(H), the effector, "
                                                      "then enters the nucleus."]),
                    Section(type="RESULTS", paragraphs=["Loss of Dl abolishes E(spl)m8-HLH expression (Fig. 2)."])]),
    Paper(pmcid="PMC100002", year=2005, journal="Development", title="The dorsal morphogen gradient",
          abstract="The dl gradient patterns the dorsoventral axis of the embryo.",
          sections=[Section(type="INTRO", paragraphs=["dl is a Rel-family transcription factor; n = 12 embryos."]),
                    Section(type="METHODS", paragraphs=["Embryos were fixed and stained with anti-dl."])]),
    Paper(pmcid="PMC100003", year=2010, journal="Genetics", title="Suppressor of Hairless targets",
          abstract="We mapped binding sites of Suppressor of Hairless (Su(H)).",
          sections=[Section(type="RESULTS", paragraphs=["Su(H); Hairless complexes repress targets.",
                                                        "Mutants of l(2)gl and abd-A were examined."]),
                    Section(type="DISCUSS", paragraphs=["α-Cat and Df(3L)ED4543 are discussed."])]),
    Paper(pmcid="PMC100004", year=2015, journal="PLoS Genet", title="Wing disc growth",
          abstract="Growth of the wing imaginal disc depends on morphogens.",
          sections=[Section(type="RESULTS", paragraphs=["dpp and wg control growth of the wing disc.",
                                                        "Cells proliferate in the pouch. " * 40]),
                    Section(type="DISCUSS", paragraphs=["Growth stops when the disc reaches its final size. " * 10])]),
]


def extra_installed(extra: str) -> bool:
    """Whether the modules of an optional extra (search.core.extras.MODULES) can be imported."""
    from importlib.util import find_spec

    from search.core.extras import MODULES

    return all(find_spec(m) is not None for m in MODULES[extra])


def needs_extra(extra: str) -> pytest.MarkDecorator:
    """Skip a test, with the install that fixes it as the reason, when an optional extra is absent (README line 1's
    test extra installs eval, cluster, curation and pyarrow, so these run there; a core-only install skips them)."""
    return pytest.mark.skipif(not extra_installed(extra),
                              reason=f"the optional '{extra}' extra is not installed (pip install 'flysift[{extra}]')")


def term_service(data_dir: Path) -> TermService:
    """The term service of a folder, over that folder's embedded engine (a test holds a folder, not settings)."""
    return TermService(data_dir, open_local(data_dir))


def build_index(data_dir: Path, papers: list[Paper] = PAPERS, collection: str = "default") -> EmbeddedEngine:
    engine = EmbeddedEngine(data_dir, collection=collection)
    build = engine.open_build("fixture", resume=False)
    for p in papers:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()
    return engine


# ---- a served API -------------------------------------------------------------------------------------------------
class LiveServer:
    """A real uvicorn server on a free loopback port, in a thread (the same HTTP agents use)."""

    def __init__(self, app: Any):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return self
            time.sleep(0.02)
        raise RuntimeError("server did not start")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


# ---- a tiny BEIR collection ---------------------------------------------------------------------------------------
DOCS = [
    {"_id": "d1", "title": "", "text": "aerodynamic heating of swept wings"},
    {"_id": "d2", "title": "Transition", "text": "boundary layer transition on flat plates"},
    {"_id": "d3", "title": "", "text": "heating rates in hypersonic flow"},
    {"_id": "d4", "title": "", "text": "vortex shedding behind cylinders"},
    {"_id": "d5", "title": "", "text": "structural loads of aircraft panels"},
]
QUERIES = [{"_id": "q1", "text": "boundary layer"}, {"_id": "q2", "text": "aerodynamic heating"},
           {"_id": "q3", "text": "turbulence spectra"}, {"_id": "q4", "text": "unjudged query"}]
QRELS = [("q1", "d2", 2), ("q2", "d3", 1), ("q3", "d4", 1)]


def write_beir(d: Path, qrels: list[tuple[str, str, int]] = QRELS) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "corpus.jsonl").write_text("".join(json.dumps(x) + "\n" for x in DOCS))
    (d / "queries.jsonl").write_text("".join(json.dumps(x) + "\n" for x in QUERIES))
    (d / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d_}\t{s}\n" for q, d_, s in qrels))
    return d


# ---- a real search cluster ----------------------------------------------------------------------------------------
# Where the node comes from, in order:
# 1. FLYSIFT_TEST_CLUSTER_URL (flavour from FLYSIFT_TEST_CLUSTER_FLAVOUR, default opensearch): a running node, e.g.
#    the one-JVM OpenSearch of deploy/cluster-local/start.sh that .ci/run starts;
# 2. Docker: testcontainers starts OpenSearch 2 and Elasticsearch 8 (the tests run once per flavour), images from
#    FLYSIFT_TEST_OPENSEARCH_IMAGE / FLYSIFT_TEST_ELASTICSEARCH_IMAGE;
# 3. neither: the tests are skipped, except under CI (CI set), where a missing node fails the run.
OPENSEARCH_IMAGE = os.environ.get("FLYSIFT_TEST_OPENSEARCH_IMAGE", "opensearchproject/opensearch:2.19.1")
ELASTICSEARCH_IMAGE = os.environ.get("FLYSIFT_TEST_ELASTICSEARCH_IMAGE",
                                     "docker.elastic.co/elasticsearch/elasticsearch:8.15.5")
JAVA_OPTS = "-Xms512m -Xmx1g"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def cluster_flavours() -> list[str]:
    """The flavours the cluster tests run against: the configured node's, or both under Docker."""
    if os.environ.get("FLYSIFT_TEST_CLUSTER_URL"):
        return [os.environ.get("FLYSIFT_TEST_CLUSTER_FLAVOUR", "opensearch")]
    return ["opensearch", "elasticsearch"]


@dataclass
class ClusterNode:
    url: str
    flavour: str
    container: Any = field(default=None, repr=False)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """A plain HTTP call for test set-up and inspection (the engine under test uses the official clients)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def indices(self, pattern: str) -> list[str]:
        return sorted(self.call("GET", f"/{pattern}/_settings/index.creation_date?allow_no_indices=true") or {})

    def cleanup(self, prefix: str) -> None:
        """Delete the prefix's indices and templates by name (Elasticsearch 8 refuses wildcard deletes)."""
        names = self.indices(f"{prefix}-*")
        if names:
            self.call("DELETE", "/" + ",".join(names))
        templates = self.call("GET", "/_index_template").get("index_templates", [])
        for t in templates:
            if t["name"].startswith(prefix + "-"):
                self.call("DELETE", f"/_index_template/{t['name']}")


def _wait_ready(url: str, timeout_s: float) -> str | None:
    """None once the node answers with yellow or green health, else the last error."""
    deadline, last = time.monotonic() + timeout_s, "no answer"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_cluster/health?wait_for_status=yellow&timeout=5s", timeout=10) as r:
                status = json.loads(r.read())["status"]
                if status in ("green", "yellow"):
                    return None
                last = f"health {status}"
        except OSError as e:
            last = str(e)
        time.sleep(1)
    return last


def _docker_available() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


_STARTED: dict[str, ClusterNode] = {}


def _start_container(flavour: str) -> ClusterNode:
    """One container per flavour for the whole run."""
    if flavour in _STARTED:
        return _STARTED[flavour]
    container: Any
    if flavour == "elasticsearch":
        from testcontainers.community.elasticsearch import ElasticSearchContainer

        container = ElasticSearchContainer(ELASTICSEARCH_IMAGE, mem_limit="2g").with_env("ES_JAVA_OPTS", JAVA_OPTS)
    else:
        from testcontainers.community.opensearch import OpenSearchContainer

        container = OpenSearchContainer(OPENSEARCH_IMAGE).with_env("OPENSEARCH_JAVA_OPTS", JAVA_OPTS)
    container.start()
    atexit.register(container.stop)
    node = ClusterNode(f"http://{container.get_container_host_ip()}:{container.get_exposed_port(9200)}", flavour,
                       container)
    _STARTED[flavour] = node
    return node


def find_cluster_node(flavour: str) -> ClusterNode:
    """The node for ``flavour`` (see the order above); skips the test, or fails it under CI, when there is none."""
    url = os.environ.get("FLYSIFT_TEST_CLUSTER_URL")
    if url:
        url = url.split(",")[0].rstrip("/")
        problem = _wait_ready(url, 120)
        if problem:
            pytest.fail(f"FLYSIFT_TEST_CLUSTER_URL={url} is set but the node is not ready: {problem}")
        return ClusterNode(url, flavour)
    if _docker_available():
        node = _start_container(flavour)
        problem = _wait_ready(node.url, 180)
        if problem:
            pytest.fail(f"the {flavour} container at {node.url} did not become ready: {problem}")
        return node
    msg = ("no search cluster for the cluster tests: start one with `URL=$(deploy/cluster-local/start.sh)` and set "
           "FLYSIFT_TEST_CLUSTER_URL=$URL, or install Docker (testcontainers)")
    if in_ci():
        pytest.fail(f"CI must run the cluster tests, but there is {msg}")
    pytest.skip(msg)


# ---- supplementary files ---------------------------------------------------------------------------------------------

SUPPLEMENT_FIXTURES = Path(__file__).parent / "fixtures" / "supplements"
#: an allele written only in the package's spreadsheet (row 4 of sheet "Alleles" of S1.xlsx), never in the article
SHEET_ONLY_ALLELE = "Dl[RevF10]"
SUPPLEMENT_ARTICLE = """<?xml version="1.0"?>
<article xmlns:xlink="http://www.w3.org/1999/xlink"><front><article-meta>
<article-id pub-id-type="pmc">PMC990001</article-id><title-group><article-title>Notch signalling at the wing
margin</article-title></title-group><pub-date pub-type="epub"><year>2011</year></pub-date>
<abstract><p>Delta and Serrate activate Notch at the dorsoventral boundary.</p></abstract></article-meta></front>
<body><sec><title>Results</title><p>Alleles are listed in Table S1; stocks in Text S3.</p></sec>
<sec sec-type="supplementary-material">
<supplementary-material xlink:href="S1.xlsx"><label>Table S1</label><caption><p>Alleles used.</p></caption>
</supplementary-material>
<supplementary-material xlink:href="S2.csv" mimetype="text" mime-subtype="csv"><label>Table S2</label>
</supplementary-material>
<supplementary-material xlink:href="S4.pdf"><label>Figure S1</label></supplementary-material>
<supplementary-material xlink:href="../../etc/passwd"><label>escape</label></supplementary-material>
<supplementary-material xlink:href="Movie_S1.mov"><label>Movie S1</label></supplementary-material>
</sec></body></article>
"""


def supplement_package(folder: Path) -> Path:
    """A PMC-style package directory: the article XML, an XLSX (merged header, the sheet-only allele), a CSV with
    GO ids and a cell that would run as a formula, a real PDF (pdfplumber's test file) and a DOCX it does not name
    (found beside it). Returns the folder."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "PMC990001.nxml").write_text(SUPPLEMENT_ARTICLE)
    shutil.copy(SUPPLEMENT_FIXTURES / "generated" / "alleles-merged-header.xlsx", folder / "S1.xlsx")
    (folder / "S2.csv").write_text("gene,go_id,note\nDl,GO:0007219,=HYPERLINK(\"x\")\nSer,GO:0045747,-2\n")
    shutil.copy(SUPPLEMENT_FIXTURES / "real" / "pdfplumber-issue-33-lorem-ipsum.pdf", folder / "S4.pdf")
    shutil.copy(SUPPLEMENT_FIXTURES / "generated" / "methods-and-stocks.docx", folder / "S3.docx")
    return folder


def needs_supplement_readers() -> None:
    """Skip (with the reason) where the supplements extra is not installed."""
    import importlib.util

    import pytest

    missing = [m for m in ("python_calamine", "pypdfium2", "docx", "olefile") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the supplements extra is not installed ({', '.join(missing)}): "
                    "pip install 'flysift[supplements]'")
