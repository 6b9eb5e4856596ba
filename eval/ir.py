"""IR metrics on BEIR-format collections, run through the search service (never an engine directly).

A collection folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``)
and ``qrels.tsv`` (header, then ``query-id corpus-id score``). We index it under its own collection name, ask the
service each judged query for 100 hits, write a TREC run file and score with ranx (nDCG@10, Recall@100, MAP, MRR),
with paired significance tests between runs. Dense and hybrid runs need the service to confirm the mode; a service
without dense support yields an error recorded in the report, never a relabelled BM25 run.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.jsonl import read_jsonl
from search.core.errors import InputError
from search.core.extras import require
from search.core.models import Paper

METRICS = ("ndcg@10", "recall@100", "map", "mrr")
MODES = ("bm25", "dense", "hybrid")
DEPTH = 100  # the service's page-size limit, and what Recall@100 needs


@dataclass
class Collection:
    name: str
    docs: list[dict[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def judged_queries(self) -> list[str]:
        return [q for q in self.queries if q in self.qrels]


def _jsonl(path: Path, required: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for n, obj in read_jsonl(path):
        if not isinstance(obj, dict):
            raise InputError("record is not an object", source=str(path), record=n)
        for key in required:
            if not isinstance(obj.get(key), str):
                raise InputError(f"missing or non-string field {key!r}", source=str(path), record=n, field=key)
        out.append(obj)
    return out


def load_beir(directory: str | Path) -> Collection:
    """Read and check a BEIR folder: unique ids, and every judged pair pointing at a known query and document."""
    d = Path(directory)
    for f in ("corpus.jsonl", "queries.jsonl", "qrels.tsv"):
        if not (d / f).is_file():
            raise InputError(f"missing {f} in collection {d}", source=str(d / f))
    docs = _jsonl(d / "corpus.jsonl", ("_id", "text"))
    doc_ids = set()
    for n, doc in enumerate(docs, 1):
        if doc["_id"] in doc_ids:
            raise InputError(f"duplicate document id {doc['_id']}", source=str(d / "corpus.jsonl"), record=n,
                             field="_id")
        doc_ids.add(doc["_id"])
    queries: dict[str, str] = {}
    for n, q in enumerate(_jsonl(d / "queries.jsonl", ("_id", "text")), 1):
        if q["_id"] in queries:
            raise InputError(f"duplicate query id {q['_id']}", source=str(d / "queries.jsonl"), record=n, field="_id")
        queries[q["_id"]] = q["text"]
    qrels: dict[str, dict[str, int]] = {}
    with (d / "qrels.tsv").open(encoding="utf-8", newline="") as fh:
        rows = csv.reader(fh, delimiter="\t")
        for n, row in enumerate(rows, 1):
            if n == 1 and row and row[0] == "query-id":
                continue
            if len(row) != 3:
                raise InputError(f"expected 3 tab-separated columns, got {len(row)}", source=str(d / "qrels.tsv"),
                                 record=n)
            qid, did, score = row
            if qid not in queries:
                raise InputError(f"unknown query {qid}", source=str(d / "qrels.tsv"), record=n, field="query-id")
            if did not in doc_ids:
                raise InputError(f"unknown document {did}", source=str(d / "qrels.tsv"), record=n, field="corpus-id")
            try:
                qrels.setdefault(qid, {})[did] = int(score)
            except ValueError as e:
                raise InputError(f"score {score!r} is not an integer", source=str(d / "qrels.tsv"), record=n,
                                 field="score") from e
    return Collection(d.name, docs, queries, qrels)


def service_collection_name(name: str) -> str:
    """The service-side collection for a BEIR folder: ``beir-`` plus the folder name, in [a-z0-9-]."""
    return "beir-" + re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


def to_paper(doc: Mapping[str, str]) -> Paper:
    """BEIR document → Paper: the document id becomes the key, the text the abstract."""
    return Paper(pmcid=doc["_id"], title=doc.get("title") or "", abstract=doc["text"])


def index_collection(client: Any, coll: Collection, collection: str, batch: int = 500) -> None:
    """Build and publish the collection in the service (a new build each time, so reruns start clean)."""
    build = client.create_build(collection)
    build_id = build["build_id"] if isinstance(build, Mapping) else build
    papers = [to_paper(d) for d in coll.docs]
    for i in range(0, len(papers), batch):
        client.add_papers(collection, build_id, papers[i:i + batch])
    client.publish_build(collection, build_id)


def _hits(response: Any) -> tuple[list[Any], Mapping[str, Any]]:
    if isinstance(response, Mapping):
        return list(response.get("hits", [])), response.get("query") or {}
    return list(response.hits), getattr(response, "query", {}) or {}


def _field(hit: Any, name: str) -> Any:
    return hit[name] if isinstance(hit, Mapping) else getattr(hit, name)


class ModeUnsupported(Exception):
    """The service cannot run this retrieval mode (or did not confirm it ran it)."""


#: at most this many characters of a per-query error message are kept (reports quote little)
MAX_ERROR_CHARS = 300


def search_run(client: Any, coll: Collection, collection: str, mode: str = "bm25", depth: int = DEPTH,
               errors: dict[str, str] | None = None) -> dict[str, dict[str, float]]:
    """Query every judged topic; returns ``{qid: {doc_id: score}}`` with up to ``depth`` hits each.

    With ``errors`` given, a query the service refuses or fails (too long, empty) is recorded there as
    ``{qid: message}`` and the run goes on without it (it scores 0); without, the first failure is raised. A client
    that cannot ask for the mode, or a service that does not confirm it, fails the whole run either way."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    extra = {} if mode == "bm25" else {"mode": mode}
    run: dict[str, dict[str, float]] = {}
    for qid in coll.judged_queries:
        try:
            response = client.search_papers(coll.queries[qid], limit=depth, offset=0, collection=collection, **extra)
        except TypeError as e:
            raise ModeUnsupported(f"the client cannot request mode {mode!r}: {e}") from e
        except Exception as e:
            if errors is None:
                raise
            errors[qid] = f"{type(e).__name__}: {e}"[:MAX_ERROR_CHARS]
            continue
        hits, how = _hits(response)
        if mode != "bm25" and how.get("mode") != mode:
            raise ModeUnsupported(f"the service did not confirm mode {mode!r} (it reported {how.get('mode')!r}); "
                                  "refusing to label its results as such")
        # keep the service's order even where scores tie, by a tiny rank-based tie-break
        run[qid] = {str(_field(h, "pmcid")): float(_field(h, "score")) - i * 1e-9 for i, h in enumerate(hits)}
    return run


def write_trec_run(run: Mapping[str, Mapping[str, float]], path: str | Path, tag: str) -> None:
    """TREC format: ``qid Q0 docid rank score tag``, ranks from 1 by descending score."""
    with Path(path).open("w", encoding="utf-8") as fh:
        for qid, docs in run.items():
            for rank, (did, score) in enumerate(sorted(docs.items(), key=lambda x: (-x[1], x[0])), 1):
                fh.write(f"{qid} Q0 {did} {rank} {score:.9f} {tag}\n")


def read_trec_run(path: str | Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    with Path(path).open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise InputError(f"expected 6 columns, got {len(parts)}", source=str(path), record=n)
            try:
                run.setdefault(parts[0], {})[parts[2]] = float(parts[4])
            except ValueError as e:
                raise InputError(f"score {parts[4]!r} is not a number", source=str(path), record=n,
                                 field="score") from e
    return run


def score_runs(qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Mapping[str, Mapping[str, float]]],
               stat_test: str = "student") -> dict[str, Any]:
    """Mean metrics and per-query values for each run (queries missing from a run score 0), and paired tests of
    every later run against the first. A run without a single hit is reported as an error, not scored."""
    ranx = require("ranx", "eval", "scoring IR runs")
    Qrels, Run, compare, evaluate = ranx.Qrels, ranx.Run, ranx.compare, ranx.evaluate
    q = Qrels.from_dict({k: dict(v) for k, v in qrels.items()})
    out: dict[str, Any] = {"runs": {}, "per_query": {}, "significance": [], "significance_test": stat_test}
    ranx_runs = []
    for name, run in runs.items():
        if not any(run.values()):  # ranx cannot score a run without a single hit ("max() arg is an empty sequence")
            out["runs"][name] = {"error": f"no query returned any hit ({len(run)} answered)"}
            continue
        r = Run.from_dict({qid: dict(docs) for qid, docs in run.items() if docs}, name=name)
        means = evaluate(q, r, list(METRICS), make_comparable=True)
        out["runs"][name] = {m: float(means[m]) for m in METRICS} | {"n_queries": len(qrels)}
        out["per_query"][name] = {qid: {m: float(r.scores[m].get(qid, 0.0)) for m in METRICS} for qid in qrels}
        ranx_runs.append(r)
    if len(ranx_runs) >= 2:
        report = compare(q, ranx_runs, list(METRICS), stat_test=stat_test, make_comparable=True).to_dict()
        base = ranx_runs[0].name
        for other in ranx_runs[1:]:
            for m in METRICS:
                out["significance"].append({
                    "a": base, "b": other.name, "metric": m,
                    "delta": out["runs"][other.name][m] - out["runs"][base][m],
                    "p_value": float(report[base]["comparisons"][other.name][m])})
    return out


def evaluate_collection(client: Any, directory: str | Path, modes: Iterable[str] = ("bm25",), *,
                        out_dir: str | Path | None = None, baselines: Mapping[str, str | Path] | None = None,
                        published: list[dict[str, Any]] | None = None, reindex: bool = True,
                        log: Callable[[str], None] = lambda _m: None, collection: str | None = None) -> dict[str, Any]:
    """Index a BEIR folder into the service collection ``collection`` (default ``beir-<folder>``), run each mode
    through the service, score, and return the IR result dict. Runs that fail (e.g. dense on a service without a
    dense index) are recorded with their error. The scorer (ranx) is checked before anything is indexed."""
    require("ranx", "eval", "scoring IR runs")
    coll = load_beir(directory)
    collection = collection or service_collection_name(coll.name)
    runs: dict[str, dict[str, dict[str, float]]] = {}
    errors: dict[str, str] = {}
    modes = list(modes)
    if reindex:
        log(f"indexing {len(coll.docs)} documents into {collection}")
        index_collection(client, coll, collection)
        if set(modes) & {"dense", "hybrid"}:
            log(f"building the dense index of {collection}")
            try:
                meta = client.build_dense(collection)
                log(f"dense index: {meta['count']} passages in {meta['seconds']} s "
                    f"({meta['passages_per_s']} passages/s)")
            except Exception as e:  # e.g. the service lacks the dense extra: the dense runs record why
                for mode in [m for m in modes if m != "bm25"]:
                    errors[f"flysift-{mode}"] = f"dense index build failed: {type(e).__name__}: {e}"
                modes = [m for m in modes if m == "bm25"]
    query_errors: dict[str, dict[str, str]] = {}
    for mode in modes:
        log(f"querying {len(coll.judged_queries)} topics, mode {mode}")
        failed: dict[str, str] = {}
        try:
            runs[f"flysift-{mode}"] = search_run(client, coll, collection, mode, errors=failed)
        except Exception as e:  # recorded, not fatal: the report must say why a run is absent
            errors[f"flysift-{mode}"] = f"{type(e).__name__}: {e}"[:MAX_ERROR_CHARS]
        if failed:
            log(f"{len(failed)} of {len(coll.judged_queries)} queries failed (scored 0), mode {mode}")
            query_errors[f"flysift-{mode}"] = failed
    for name, path in (baselines or {}).items():
        runs[name] = read_trec_run(path)
    result = score_runs(coll.qrels, runs) if runs else {"runs": {}, "per_query": {}, "significance": []}
    for name, err in errors.items():
        result["runs"][name] = {"error": err}
    for name, failed in query_errors.items():
        if name in result["runs"]:
            result["runs"][name]["n_failed"] = len(failed)
    result["query_errors"] = query_errors
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        for name, run in runs.items():
            write_trec_run(run, Path(out_dir) / f"{name}.trec", name)
    ok = [r for r in result["runs"].values() if "error" not in r]
    headline = ok[0] if ok else {}
    return {"schema": "flysift.eval.ir/1", "collection": coll.name, "service_collection": collection,
            "n_docs": len(coll.docs), "n_queries": len(coll.judged_queries),
            **{m: headline.get(m) for m in METRICS}, **result, "published": published or []}
