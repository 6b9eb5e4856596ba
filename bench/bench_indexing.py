"""What an index build costs: flysift beside raw tantivy, rank_bm25, bm25s and Lucene, on the same generated corpora,
in one process tree (issue #12, "Measure").

For each corpus size (``--sizes``, default 500, 2,000 and 4,000 papers × ~8,300 words, seed 7) and each engine: build
wall and CPU seconds (user + system of the build's whole process tree from its start, interpreter, JVM and imports
included: the kernel's rusage of the reaped child, or the worker's own rusage at the end of its build step), peak
RSS, index size on disk, query CPU p50/p99 for the generator's gene queries, and recall@16 per gene query kind
against the generator's answer key. Then the CPU exponent of each engine's build in corpus size (least-squares slope
of log CPU vs log papers: 1.0 is linear), and with ``--full`` one full-size (16,898-paper) flysift build, wall and
CPU.

Each engine builds in a child process of its own, so one engine's memory is never another's:

* **flysift**: the real ``flysift index corpus`` CLI with a fresh ``FLYSIFT_DATA_DIR`` (``--workers`` when its
  ``--help`` lists it); queries in this process through ``search.engines.open_local`` + the planner, as the service
  calls them. Index size is the whole data dir (tantivy indices, ``papers.db``, rejects, manifests).
* **tantivy (raw)**: one field of title + abstract + body with tantivy's ``en_stem`` analyser (simple tokenizer,
  lower-case, English stemmer; positions kept, as flysift keeps them) and a stored id field; default writer (heap
  and threads chosen by tantivy); query words parsed by the same analyser, OR-ed.
* **rank_bm25**: FlyAOC's retrieval, ``BM25Okapi`` over lower-cased whitespace tokens of title, abstract and the
  sections FlyAOC indexes (``bench_embedded.flyaoc_tokens``); in memory, so no index size.
* **bm25s** (``pip install -e ".[bench]"``): Lucene BM25 (k1 0.9, b 0.4, ``bench_queries``' reference) over
  title + abstract + body, English stop list, Snowball English stemmer (PyStemmer); saved to disk (counted in build).
* **Lucene**, when one is given: Anserini's ``IndexCollection`` over a JsonCollection written from the corpus
  (``contents`` = title + abstract + body; written once per corpus, not counted), DefaultLuceneDocumentGenerator,
  ``-storePositions``, one thread per core; queries through Anserini's searcher (BM25 k1 0.9, b 0.4, Porter
  stemmer + Lucene's stop words), timed on the searching thread after three warm-up passes (for the JIT). Two ways
  to provide it:

  - Pyserini (needs Java 21+; 6.5 GB installed: it pulls PyTorch and CUDA wheels) in a scratch virtualenv, never
    in the project's::

        python3.11 -m venv /tmp/pyserini && /tmp/pyserini/bin/pip install pyserini
        export JAVA_HOME=/usr/lib/jvm/temurin-25-jdk-amd64     # any JDK 21+
        python bench/bench_indexing.py --pyserini-python /tmp/pyserini/bin/python   # or FLYSIFT_BENCH_PYSERINI

    Builds run ``python -m pyserini.index.lucene``; queries the Anserini searcher behind Pyserini's
    ``LuceneSearcher``, through Pyserini's JVM bridge.
  - Anserini's fat jar alone (no Python stack), from Maven Central::

        mvn dependency:get -Dartifact=io.anserini:anserini:1.5.0:jar:fatjar -Dtransitive=false
        python bench/bench_indexing.py \\
            --anserini-jar ~/.m2/repository/io/anserini/anserini/1.5.0/anserini-1.5.0-fatjar.jar

    (or ``curl -O https://repo1.maven.org/maven2/io/anserini/anserini/1.5.0/anserini-1.5.0-fatjar.jar``; env
    ``FLYSIFT_BENCH_ANSERINI_JAR``). Builds run ``java -cp JAR io.anserini.index.IndexCollection``; queries a small
    Java program (this file's ``LUCENE_QUERIES_JAVA``) run from source by ``java``.

  The JDK is ``--java-home``, else ``$JAVA_HOME`` when it is 21 or later, else the newest JDK 21+ in /usr/lib/jvm.

An engine that is absent is skipped with the reason printed; one that fails records its error and the others go on.

Usage::

    python bench/bench_indexing.py --sizes 500 --work /tmp/bench-indexing          # smoke (a few minutes)
    python bench/bench_indexing.py --pyserini-python /tmp/pyserini/bin/python       # 500, 2,000, 4,000 papers
    python bench/bench_indexing.py --sizes '' --full                                # the 16,898-paper build alone

Corpora are cached under ``--work`` (``corpora/<papers>``) and reused when their parameters match; ``results.json``
and ``results.md`` (markdown tables) land in ``--work``, and ``--out`` writes the JSON elsewhere too.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_embedded import K, ensure_corpus, flyaoc_tokens, gene_queries, quality, timed  # noqa: E402
from bench.common import (  # noqa: E402
    REPO,
    dir_bytes,
    flysift_command,
    fmt_bytes,
    machine,
    markdown_table,
    percentile,
    run_measured,
    write_json,
)

FULL_PAPERS = 16_898
ENGINES = ("flysift", "flysift-python", "tantivy", "rank_bm25", "bm25s", "lucene")
KINDS = ("symbol", "fullname", "synonym", "all")
#: the query set every engine answers (one line per query in the Lucene workers' input)
QUERIES_FILE, LUCENE_OUT = "queries.txt", "lucene_hits.tsv"
ERR_CHARS = 600

#: Anserini's searcher over the queries of args[1] (one per line), three warm-up passes (the JIT compiles the hot
#: path on the way), then per query: wall ns, CPU ns of
#: the searching thread, the top-k ids; written as TSV to args[2]. Run from source: ``java -cp JAR File.java ...``.
LUCENE_QUERIES_JAVA = """\
import io.anserini.search.SimpleSearcher;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

public class LuceneQueries {
  public static void main(String[] args) throws Exception {
    List<String> queries = Files.readAllLines(Path.of(args[1]));
    int k = Integer.parseInt(args[3]);
    ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    try (SimpleSearcher searcher = new SimpleSearcher(args[0])) {
      for (int pass = 0; pass < 3; pass++) for (String q : queries) searcher.search(q, k);
      StringBuilder out = new StringBuilder();
      for (String q : queries) {
        long w0 = System.nanoTime(), c0 = mx.getCurrentThreadCpuTime();
        var hits = searcher.search(q, k);
        long c1 = mx.getCurrentThreadCpuTime(), w1 = System.nanoTime();
        out.append(w1 - w0).append('\\t').append(c1 - c0).append('\\t');
        for (int i = 0; i < hits.length; i++) out.append(i == 0 ? "" : " ").append(hits[i].docid);
        out.append('\\n');
      }
      Files.writeString(Path.of(args[2]), out);
    }
  }
}
"""

#: the same through Pyserini's JVM bridge and the searcher class its ``LuceneSearcher`` wraps (importing
#: ``pyserini.search`` loads its encoders, and the OpenAI one refuses to import without an API key)
LUCENE_QUERIES_PY = """\
import sys, time
from pyserini.pyclass import autoclass
index, queries_file, out_file, k = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
queries = open(queries_file, encoding="utf-8").read().splitlines()
searcher = autoclass("io.anserini.search.SimpleSearcher")(index)
for q in queries * 3:
    searcher.search(q, k)
lines = []
for q in queries:
    w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    hits = [h.docid for h in searcher.search(q, k)]
    c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
    lines.append(f"{w1 - w0}\\t{c1 - c0}\\t" + " ".join(hits))
searcher.close()
open(out_file, "w", encoding="utf-8").write("\\n".join(lines) + "\\n")
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------------ corpus

def records(corpus: Path) -> Iterator[dict]:
    with open(corpus, encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)


def full_text(rec: dict) -> str:
    """Title, abstract and every section's paragraphs (what flysift indexes, METHODS included) as one string."""
    parts = [rec.get("title") or "", rec.get("abstract") or ""]
    for paragraphs in (rec.get("sections") or {}).values():
        parts += paragraphs if isinstance(paragraphs, list) else [paragraphs or ""]
    return "\n".join(parts)


def json_collection(corpus: Path) -> Path:
    """Anserini's JsonCollection of the corpus (``id``, ``contents``), written once beside it (not a build cost)."""
    out = corpus.parent / "jsoncollection"
    stamp = out / "source.json"
    source = {"bytes": corpus.stat().st_size, "mtime_ns": corpus.stat().st_mtime_ns}
    if stamp.exists() and json.loads(stamp.read_text()) == source:
        return out / "docs"
    docs = out / "docs"
    shutil.rmtree(out, ignore_errors=True)
    docs.mkdir(parents=True)
    with open(docs / "docs.jsonl", "w", encoding="utf-8") as fh:
        for rec in records(corpus):
            fh.write(json.dumps({"id": rec["pmcid"], "contents": full_text(rec)}, ensure_ascii=False) + "\n")
    write_json(stamp, source)
    return docs


# ----------------------------------------------------------------------------------------------- measurement

def cpu_now() -> float:
    """User + system seconds of this process and of the children it has reaped."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def query_summary(wall_ms: list[float], cpu_ms: list[float]) -> dict[str, float]:
    return {"n": len(cpu_ms), "cpu_p50_ms": round(percentile(cpu_ms, 50), 3),
            "cpu_p99_ms": round(percentile(cpu_ms, 99), 3), "wall_p50_ms": round(percentile(wall_ms, 50), 3),
            "wall_p99_ms": round(percentile(wall_ms, 99), 3)}


def error_text(text: str) -> str:
    """The end of a child's stderr (where the reason is), bounded, on one line."""
    return " ".join(text.strip().split())[-ERR_CHARS:]


def fit_exponent(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(CPU) against log(papers): the exponent b of CPU ≈ a·papers^b."""
    pts = [(math.log(n), math.log(c)) for n, c in points if n > 0 and c > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    return round(sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts), 3)


# -------------------------------------------------------------------------------------- in-child python peers

def worker(engine: str, corpus: Path, index_dir: Path, queries_file: Path, result_file: Path) -> None:
    """Child process: build one peer's index from the corpus file, then answer the queries after one warm-up pass;
    ids, timings and sizes go to ``result_file`` as JSON.

    Build wall and CPU count from the process's start (interpreter and imports included), as they do for the flysift
    CLI and Lucene's JVM; ``build_only`` leaves the start-up out."""
    import psutil

    started, c0, w0 = psutil.Process().create_time(), cpu_now(), time.perf_counter()
    one = {"tantivy": tantivy_peer, "rank_bm25": rank_bm25_peer, "bm25s": bm25s_peer}[engine](corpus, index_dir)
    build = {"wall_s": round(time.time() - started, 2), "cpu_s": round(cpu_now(), 2),
             "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
             "index_bytes": dir_bytes(index_dir) if index_dir.exists() else None,
             "build_only": {"wall_s": round(time.perf_counter() - w0, 2), "cpu_s": round(cpu_now() - c0, 2)}}
    queries = json.loads(queries_file.read_text(encoding="utf-8"))
    hits = [one(q["query"]) for q in queries]
    wall, cpu = timed(one, queries)
    write_json(result_file, {"build": build, "query": query_summary(wall, cpu), "hits": hits})


def tantivy_peer(corpus: Path, index_dir: Path) -> Callable[[str], list[str]]:
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw")
    sb.add_text_field("body", stored=False, tokenizer_name="en_stem")
    index_dir.mkdir(parents=True)
    index = tantivy.Index(sb.build(), path=str(index_dir))
    writer = index.writer()
    for rec in records(corpus):
        writer.add_document(tantivy.Document(id=rec["pmcid"], body=full_text(rec)))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    words = re.compile(r"[^\W_]+")     # what the simple tokenizer keeps: no query syntax reaches the parser

    def one(text: str) -> list[str]:
        terms = words.findall(text.lower())
        if not terms:
            return []
        res = searcher.search(index.parse_query(" ".join(terms), ["body"]), K)
        return [searcher.doc(addr)["id"][0] for _, addr in res.hits]

    return one


def rank_bm25_peer(corpus: Path, index_dir: Path) -> Callable[[str], list[str]]:
    import numpy as np
    from rank_bm25 import BM25Okapi

    ids: list[str] = []

    def docs() -> Iterator[list[str]]:
        for rec in records(corpus):
            ids.append(rec["pmcid"])
            yield flyaoc_tokens(rec)

    bm25 = BM25Okapi(docs())

    def one(text: str) -> list[str]:
        scores = bm25.get_scores(text.lower().split())
        top = np.argpartition(-scores, min(K, len(scores) - 1))[:K]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [ids[i] for i in top if scores[i] > 0]

    return one


def bm25s_peer(corpus: Path, index_dir: Path) -> Callable[[str], list[str]]:
    import bm25s
    import Stemmer

    from bench.bench_queries import REF_B, REF_K1

    stemmer = Stemmer.Stemmer("english")
    ids, texts = [], []
    for rec in records(corpus):
        ids.append(rec["pmcid"])
        texts.append(full_text(rec))
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    del texts
    model = bm25s.BM25(method="lucene", k1=REF_K1, b=REF_B)
    model.index(tokens, show_progress=False)
    model.save(str(index_dir))

    def one(text: str) -> list[str]:
        toks = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)[0]
        toks = [t for t in toks if t in model.vocab_dict]
        if not toks:
            return []
        docs, scores = model.retrieve([toks], k=min(K, len(ids)), show_progress=False)
        return [ids[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    return one


def python_peer(engine: str, corpus: Path, queries: list[dict], run_dir: Path) -> dict:
    """One peer in a child process of its own (``worker``); its measures, or why it failed."""
    index_dir, qfile, rfile = run_dir / "index", run_dir / "queries.json", run_dir / "result.json"
    write_json(qfile, queries)
    run = run_measured([sys.executable, __file__, "--worker", engine, "--corpus", str(corpus), "--index-dir",
                        str(index_dir), "--queries-file", str(qfile), "--result-file", str(rfile)], cwd=REPO)
    if run.returncode != 0:
        return {"status": "failed", "error": f"exit status {run.returncode}: {error_text(run.stderr)}"}
    res = json.loads(rfile.read_text(encoding="utf-8"))
    return {"status": "ok", "build": res["build"], "query": res["query"], "hits": res["hits"],
            "child": {"wall_s": round(run.seconds, 2), "cpu_s": round(run.cpu_seconds, 2), "peak_rss": run.peak_rss}}


# ---------------------------------------------------------------------------------------------------- flysift

def flysift_help() -> str:
    return subprocess.run([*flysift_command(), "index", "corpus", "--help"], capture_output=True, text=True,
                          check=True).stdout


def flysift_build(corpus: Path, data_dir: Path, workers: int | None,
                  env: dict[str, str] | None = None) -> tuple[dict, str | None]:
    """The real CLI in a fresh data dir; its wall, CPU of the child tree, peak RSS, index size (or an error)."""
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    cmd = [*flysift_command(), "index", "corpus", str(corpus), "--data-dir", str(data_dir), "--json", "--no-resume"]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    run = run_measured(cmd, env=dict(os.environ, FLYSIFT_DATA_DIR=str(data_dir), **(env or {})),
                       cwd=data_dir.parent)
    if run.returncode != 0:
        return {}, f"exit status {run.returncode}: {error_text(run.stderr)}"
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    return {"wall_s": round(run.seconds, 2), "cpu_s": round(run.cpu_seconds, 2), "peak_rss": run.peak_rss,
            "peak_anon": run.peak_anon,
            "index_bytes": dir_bytes(data_dir), "workers": workers, "summary": summary}, None


def flysift_queries(data_dir: Path, queries: list[dict], genes_tsv: Path | None = None) -> tuple[dict, list[list[str]]]:
    """Planner + engine in this process, as the service calls them, after one warm-up pass; with the corpus's gene
    list as the lexicon (``genes_tsv``), the planner gets its fold set (older names in another case, ``Hh`` → hh)."""
    from indexer.synthetic import read_genes_tsv
    from search.engines import open_local
    from search.retrieval.planner import plan
    from search.text.lexicon import Lexicon

    foldable = Lexicon(read_genes_tsv(genes_tsv)).foldable() if genes_tsv and genes_tsv.exists() else frozenset()
    engine = open_local(data_dir)
    try:
        def one(text: str) -> list[str]:
            return [h.pmcid for h in engine.search_papers(plan(text, foldable=foldable), limit=K, snippets=False).hits]

        hits = [one(q["query"]) for q in queries]
        wall, cpu = timed(one, queries)
    finally:
        engine.close()
    return query_summary(wall, cpu), hits


def flysift_side(corpus: Path, queries: list[dict] | None, run_dir: Path, workers: int | None,
                 env: dict[str, str] | None = None) -> dict:
    build, err = flysift_build(corpus, run_dir / "data", workers, env)
    if err:
        return {"status": "failed", "error": err}
    out: dict[str, Any] = {"status": "ok", "build": build}
    if queries is not None:
        out["query"], out["hits"] = flysift_queries(run_dir / "data", queries, corpus.parent / "genes.tsv")
    return out


# ----------------------------------------------------------------------------------------------------- Lucene

def find_java(java_home: str | None) -> tuple[Path | None, str]:
    """A JDK of version 21 or later: ``--java-home``, else ``$JAVA_HOME`` if new enough, else the newest under
    /usr/lib/jvm."""
    def major(home: Path) -> int:
        try:
            out = subprocess.run([str(home / "bin" / "java"), "-version"], capture_output=True, text=True,
                                 timeout=60).stderr
        except (OSError, subprocess.TimeoutExpired):
            return 0
        m = re.search(r'version "(\d+)', out)
        return int(m.group(1)) if m else 0

    env_home = os.environ.get("JAVA_HOME")
    homes = [Path(java_home)] if java_home else [*([Path(env_home)] if env_home else []),
                                                 *sorted(Path("/usr/lib/jvm").glob("*"))]
    found = [(major(h), h) for h in homes if (h / "bin" / "java").exists()]
    usable = [(v, h) for v, h in found if v >= 21]
    if usable:       # $JAVA_HOME first when it is new enough, else the newest installed
        return (usable[0] if env_home and usable[0][1] == Path(env_home) else max(usable))[1], ""
    seen = ", ".join(f"{h} ({v or '?'})" for v, h in found) or "none"
    return None, f"no JDK 21+ (Lucene/Anserini needs one; pass --java-home or set JAVA_HOME); found: {seen}"


def pyserini_jar(python: str) -> Path | None:
    """The Anserini fat jar a Pyserini install ships (found without importing Pyserini, which loads PyTorch)."""
    code = "import importlib.util as u; print(u.find_spec('pyserini').submodule_search_locations[0])"
    try:
        root = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    jars = sorted((Path(root) / "resources" / "jars").glob("anserini-*-fatjar.jar"))
    return jars[-1] if jars else None


class Lucene:
    """Lucene through Pyserini's CLI and searcher, or through Anserini's fat jar and ``java``; ``reason`` says why
    it is absent."""

    def __init__(self, args: argparse.Namespace):
        self.python = args.pyserini_python or os.environ.get("FLYSIFT_BENCH_PYSERINI")
        self.jar = args.anserini_jar or os.environ.get("FLYSIFT_BENCH_ANSERINI_JAR")
        self.java_home: Path | None = None
        self.reason, self.label = "", ""
        if not self.python and not self.jar:
            self.reason = ("no Lucene given: pass --pyserini-python PATH (a virtualenv with `pip install pyserini`) "
                           "or --anserini-jar PATH (io.anserini:anserini fatjar from Maven Central); see the docstring")
            return
        if self.python and not Path(self.python).exists():
            self.reason = f"--pyserini-python {self.python[:200]}: no such file"
            return
        if self.jar and not Path(self.jar).is_file():
            self.reason = f"--anserini-jar {self.jar[:200]}: no such file"
            return
        self.java_home, self.reason = find_java(args.java_home)
        if self.java_home is None:
            return
        jar = Path(self.jar) if self.jar else pyserini_jar(str(self.python))
        version = re.search(r"anserini-([\w.]+?)-fatjar", jar.name) if jar else None
        anserini = f"Anserini {version.group(1) if version else '?'}"
        self.label = f"Lucene (Pyserini, {anserini})" if self.python else f"Lucene ({anserini} jar)"

    def env(self) -> dict[str, str]:
        assert self.java_home is not None
        return dict(os.environ, JAVA_HOME=str(self.java_home),
                    PATH=f"{self.java_home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")

    def java(self) -> str:
        assert self.java_home is not None
        return str(self.java_home / "bin" / "java")

    def build_cmd(self, docs: Path, index_dir: Path, threads: int) -> list[str]:
        flags = ["-collection", "JsonCollection", "-input", str(docs), "-index", str(index_dir), "-generator",
                 "DefaultLuceneDocumentGenerator", "-threads", str(threads), "-storePositions"]
        if self.python:
            return [str(self.python), "-m", "pyserini.index.lucene", *(f"-{f}" if f.startswith("-") else f
                                                                          for f in flags)]
        return [self.java(), "-cp", str(self.jar), "io.anserini.index.IndexCollection",
                *flags]

    def query_cmd(self, index_dir: Path, qfile: Path, out: Path, run_dir: Path) -> list[str]:
        if self.python:
            return [str(self.python), "-c", LUCENE_QUERIES_PY, str(index_dir), str(qfile), str(out), str(K)]
        src = run_dir / "LuceneQueries.java"
        src.write_text(LUCENE_QUERIES_JAVA, encoding="utf-8")
        return [self.java(), "-cp", str(self.jar), str(src), str(index_dir), str(qfile),
                str(out), str(K)]

    def side(self, corpus: Path, queries: list[dict], run_dir: Path) -> dict:
        docs = json_collection(corpus)
        index_dir, qfile, out = run_dir / "index", run_dir / QUERIES_FILE, run_dir / LUCENE_OUT
        shutil.rmtree(index_dir, ignore_errors=True)
        run = run_measured(self.build_cmd(docs, index_dir, os.cpu_count() or 1), env=self.env(), cwd=run_dir)
        if run.returncode != 0:
            return {"status": "failed", "error": f"build: exit status {run.returncode}: {error_text(run.stderr)}"}
        build = {"wall_s": round(run.seconds, 2), "cpu_s": round(run.cpu_seconds, 2), "peak_rss": run.peak_rss,
                 "index_bytes": dir_bytes(index_dir)}
        qfile.write_text("".join(" ".join(q["query"].split()) + "\n" for q in queries), encoding="utf-8")
        qrun = run_measured(self.query_cmd(index_dir, qfile, out, run_dir), env=self.env(), cwd=run_dir)
        if qrun.returncode != 0:
            return {"status": "failed", "build": build,
                    "error": f"queries: exit status {qrun.returncode}: {error_text(qrun.stderr)}"}
        wall, cpu, hits = [], [], []
        for line in out.read_text(encoding="utf-8").splitlines():
            w, c, ids = line.split("\t")
            wall.append(int(w) / 1e6)
            cpu.append(int(c) / 1e6)
            hits.append(ids.split())
        if len(hits) != len(queries):
            return {"status": "failed", "build": build,
                    "error": f"queries: {len(hits)} answers for {len(queries)} queries in {out.name}"}
        return {"status": "ok", "label": self.label, "build": build, "query": query_summary(wall, cpu), "hits": hits}


# -------------------------------------------------------------------------------------------------- one size

def one_size(args: argparse.Namespace, papers: int, lucene: Lucene, workers: int | None) -> dict:
    corpus_dir = args.work / "corpora" / str(papers)
    log(f"corpus: {papers} papers × {args.words} words → {corpus_dir}")
    info = ensure_corpus(SimpleNamespace(papers=papers, words=args.words, seed=args.seed), corpus_dir)
    corpus = corpus_dir / "corpus.jsonl"
    key = json.loads((corpus_dir / "answer_key.json").read_text(encoding="utf-8"))
    queries = gene_queries(corpus_dir / "genes.tsv", key, args.queries)
    runs = args.work / "runs" / str(papers)
    out: dict[str, Any] = {"papers": papers, "corpus": info, "queries": len(queries), "engines": {}}
    for engine in args.engines:
        log(f"[{papers}] {engine}")
        run_dir = runs / engine
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        res: dict[str, Any]
        try:
            if engine == "flysift":
                from search.text import tokens

                res = flysift_side(corpus, queries, run_dir, workers)
                res["label"] = f"flysift ({tokens.BACKEND} tokens)"
            elif engine == "flysift-python":  # the same index from the pure-Python tokens (no native extension)
                res = flysift_side(corpus, None, run_dir, workers, {"FLYSIFT_TOKENIZER": "python"})
            elif engine == "lucene":
                res = lucene.side(corpus, queries, run_dir) if lucene.label else {"status": "skipped",
                                                                                   "reason": lucene.reason}
            elif engine == "bm25s" and not has_module("bm25s", "Stemmer"):
                res = {"status": "skipped", "reason": "bm25s/PyStemmer not installed: pip install -e '.[bench]'"}
            else:
                res = python_peer(engine, corpus, queries, run_dir)
        except Exception as exc:  # noqa: BLE001 - one engine's failure is a result, the others still run
            res = {"status": "failed", "error": f"{type(exc).__name__}: {str(exc)[:ERR_CHARS]}"}
        if "hits" in res:
            res["quality"] = quality(queries, res.pop("hits"))
        if not args.keep_indexes:
            shutil.rmtree(run_dir, ignore_errors=True)
        out["engines"][engine] = res
        log(f"  {summary_line(res)}")
    return out


def has_module(*names: str) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(n) is not None for n in names)


def summary_line(res: dict) -> str:
    if res["status"] != "ok":
        return f"{res['status']}: {res.get('reason') or res.get('error')}"
    b, q = res["build"], res.get("query") or {}
    size = fmt_bytes(b["index_bytes"]) if b.get("index_bytes") else "in memory"
    return (f"build {b['wall_s']} s wall, {b['cpu_s']} s CPU, peak {fmt_bytes(b['peak_rss'])}, {size}; "
            f"query CPU p50 {q.get('cpu_p50_ms')} ms; recall@16 all {res['quality']['all']['recall@16']}"
            if q else f"build {b['wall_s']} s wall, {b['cpu_s']} s CPU, peak {fmt_bytes(b['peak_rss'])}, {size}")


# ----------------------------------------------------------------------------------------------------- report

def engine_name(engine: str, res: dict) -> str:
    return res.get("label") or {"flysift": "flysift (embedded)", "flysift-python": "flysift, pure-Python tokens",
                                "tantivy": "tantivy (one stemmed field)",
                                "rank_bm25": "rank_bm25 (FlyAOC)", "bm25s": "bm25s (stemmed)",
                                "lucene": "Lucene"}[engine]


def report(results: dict) -> str:
    m = results["machine"]
    parts = [f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, Python {m['python']}; load average "
             f"{m['load_avg_1m']} at the start, {results.get('load_avg_1m_end', '?')} at the end. Command: "
             f"`{results['command']}`. Build wall and CPU (user + system) of the build's process tree from its start "
             "(interpreter, JVM and imports included); query CPU = the searching thread's CPU per query, after a "
             "warm-up pass (three for Lucene's JIT).\n"]
    for size in results["sizes"]:
        c = size["corpus"]["summary"]
        parts.append(f"### {c['papers']:,} papers, {c['words']:,} words ({fmt_bytes(c['bytes'])} JSONL), seed "
                     f"{c['seed']}, {size['queries']} gene queries\n")
        fs = size["engines"].get("flysift", {})
        fs_cpu = fs["build"]["cpu_s"] if fs.get("status") == "ok" else None
        rows, notes = [], []
        for engine, res in size["engines"].items():
            name = engine_name(engine, res)
            if res["status"] != "ok":
                notes.append(f"- {name}: {res['status']}: {res.get('reason') or res.get('error')}")
                continue
            b, q, qual = res["build"], res.get("query", {}), res.get("quality", {})
            ratio = f"{fs_cpu / b['cpu_s']:.2f}×" if fs_cpu and b["cpu_s"] and engine != "flysift" else "–"
            rows.append([name, f"{b['wall_s']:.1f}", f"{b['cpu_s']:.1f}", ratio, fmt_bytes(b["peak_rss"]),
                         fmt_bytes(b["index_bytes"]) if b.get("index_bytes") else "– (memory)",
                         f"{q['cpu_p50_ms']:.2f} / {q['cpu_p99_ms']:.2f}" if q else "–",
                         *(f"{qual[k]['recall@16']:.3f}" if k in qual else "–" for k in KINDS)])
        parts.append(markdown_table(["engine", "build wall s", "build CPU s", "flysift CPU ÷ this", "peak RSS",
                                     "index size", "query CPU p50 / p99 ms",
                                     *(f"recall@16 {k}" for k in KINDS)], rows))
        counts: dict = next((r["quality"] for r in size["engines"].values() if r.get("quality")), {})
        if counts:
            parts.append("Queries per kind (distinct): " + ", ".join(f"{k} {counts[k]['queries']}" for k in KINDS
                                                                       if k in counts) + ".\n")
        if notes:
            parts.append("\n".join(notes) + "\n")
    if results.get("exponents"):
        parts.append("### Build CPU exponent in corpus size (CPU ≈ a·papers^b, least squares over the sizes)\n")
        parts.append(markdown_table(["engine", "b", "sizes"],
                                    [[engine_name(e, v), f"{v['b']:.3f}", ", ".join(map(str, v["papers"]))]
                                     for e, v in results["exponents"].items()]))
    if results.get("full"):
        f = results["full"]
        if f.get("status") == "ok":
            b = f["build"]
            parts.append(f"### Full size: {f['papers']:,} papers\n\nflysift build: {b['wall_s']:.0f} s wall, "
                         f"{b['cpu_s']:.0f} s CPU, peak RSS {fmt_bytes(b['peak_rss'])} (of it anonymous memory, "
                         f"without mapped index files: {fmt_bytes(b.get('peak_anon', 0))}), index "
                         f"{fmt_bytes(b['index_bytes'])}.\n")
        else:
            parts.append(f"### Full size\n\nflysift build {f.get('status')}: {f.get('error')}\n")
    t = results.get("totals")
    if t:
        parts.append(f"Whole run: {t['wall_s']:.0f} s wall, {t['cpu_s']:.0f} s CPU (this process and its children).\n")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------------- main

def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--sizes: expected comma-separated paper counts, got {text[:200]!r}") from None
    if any(n < 1 for n in sizes):
        raise SystemExit(f"--sizes: paper counts must be positive, got {text[:200]!r}")
    return sizes


def parse_engines(text: str) -> list[str]:
    names = [e.strip() for e in text.split(",") if e.strip()]
    bad = [n for n in names if n not in ENGINES]
    if bad:
        raise SystemExit(f"--engines: unknown {', '.join(b[:40] for b in bad)}; valid: {', '.join(ENGINES)}")
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--sizes", default="500,2000,4000", help="Corpus sizes in papers, comma-separated ('' for none)")
    ap.add_argument("--words", type=int, default=8_300, help="Words per paper (FlyAOC's mean)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--queries", type=int, default=200, help="Gene queries per size (bench_embedded's set)")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"Subset of {','.join(ENGINES)}")
    ap.add_argument("--full", action="store_true", help=f"Also one {FULL_PAPERS:,}-paper flysift build (~20 min)")
    ap.add_argument("--work", type=Path, default=Path("bench-work/indexing"),
                    help="Folder for corpora (reused), runs and results")
    ap.add_argument("--out", type=Path, help="Also write the results JSON here")
    ap.add_argument("--keep-indexes", action="store_true", help="Keep every engine's index under WORK/runs")
    ap.add_argument("--pyserini-python", help="Python of a virtualenv with pyserini (env FLYSIFT_BENCH_PYSERINI)")
    ap.add_argument("--anserini-jar", help="Anserini fat jar (env FLYSIFT_BENCH_ANSERINI_JAR)")
    ap.add_argument("--java-home", help="JDK 21+ for Lucene (default: $JAVA_HOME if 21+, else the newest)")
    ap.add_argument("--worker", choices=("tantivy", "rank_bm25", "bm25s"), help=argparse.SUPPRESS)
    ap.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--index-dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--queries-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.corpus, args.index_dir, args.queries_file, args.result_file)
        return

    sizes, args.engines = parse_sizes(args.sizes), parse_engines(args.engines)
    args.work = args.work.resolve()
    started = time.perf_counter(), cpu_now()
    workers = (os.cpu_count() or 1) if "--workers" in flysift_help() else None
    lucene = Lucene(args)
    if "lucene" in args.engines and not lucene.label:
        log(f"lucene: skipped: {lucene.reason}")
    results: dict[str, Any] = {"machine": machine(), "command": shlex.join(sys.argv), "words": args.words,
                               "seed": args.seed, "flysift_workers": workers, "sizes": []}
    for papers in sizes:
        results["sizes"].append(one_size(args, papers, lucene, workers))
    results["exponents"] = {}
    for engine in args.engines:
        pts = [(s["papers"], s["engines"][engine]["build"]["cpu_s"]) for s in results["sizes"]
               if s["engines"].get(engine, {}).get("status") == "ok"]
        b = fit_exponent(pts)
        if b is not None:
            label = next(s["engines"][engine].get("label", "") for s in results["sizes"] if engine in s["engines"])
            results["exponents"][engine] = {"b": b, "papers": [n for n, _ in pts], "label": label}
    if args.full:
        corpus_dir = args.work / "corpora" / str(FULL_PAPERS)
        log(f"full size: {FULL_PAPERS} papers → {corpus_dir}")
        info = ensure_corpus(SimpleNamespace(papers=FULL_PAPERS, words=args.words, seed=args.seed), corpus_dir)
        run_dir = args.work / "runs" / str(FULL_PAPERS)
        try:
            full = flysift_side(corpus_dir / "corpus.jsonl", None, run_dir / "flysift", workers)
        except Exception as exc:  # noqa: BLE001 - recorded like any engine failure
            full = {"status": "failed", "error": f"{type(exc).__name__}: {str(exc)[:ERR_CHARS]}"}
        results["full"] = {"papers": FULL_PAPERS, "corpus": info, **full}
        if not args.keep_indexes:
            shutil.rmtree(run_dir, ignore_errors=True)
        log(f"  {summary_line(full)}")
    results["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    results["totals"] = {"wall_s": round(time.perf_counter() - started[0], 1),
                         "cpu_s": round(cpu_now() - started[1], 1)}
    md = report(results)
    (args.work / "results.md").write_text(md, encoding="utf-8")
    write_json(args.work / "results.json", results)
    if args.out:
        write_json(args.out, results)
    print(md)


if __name__ == "__main__":
    main()
