"""The cluster engine's concept index (``flysift index concepts``), as the embedded engine keeps its own: one document
per mention in ``<base>-concepts-<papers version>`` (the published papers index it belongs to), found through the
alias ``<base>-concepts``. A mention holds its paper, passage, term, span, words and ``closure`` (the term and each
ancestor: what ``term:`` searches); a ``done`` document per paper read lets an interrupted run resume. The index is
written without the alias and moved behind it when complete; a search whose papers index is not the one the concept
index belongs to (the collection was re-indexed since) is refused as ``concepts_missing``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal

from search.core.errors import FlysiftError
from search.core.models import ConceptMention
from search.core.query import MAX_CONCEPT_IDS

PAGE = 2000
_KEY = {"type": "keyword"}
_STORED = {"type": "integer", "index": False, "doc_values": False}
MAPPING: dict[str, Any] = {"dynamic": "strict", "properties": {
    "kind": _KEY, "pmcid": _KEY, "passage": _KEY, "term": _KEY, "closure": _KEY, "seq": {"type": "long"},
    "start": _STORED, "end": _STORED, "text": {"type": "keyword", "index": False, "doc_values": False},
    "via": {"type": "keyword", "index": False, "doc_values": False},
}}

Request = Callable[..., Any]
#: (passage id, term id, start, end, text, via, the term and its ancestors)
Row = tuple[str, str, int, int, str, str, Sequence[str]]


def concepts_missing(collection: str, why: str = "has no concept index for its published build") -> FlysiftError:
    return FlysiftError(f"Collection {collection!r} {why}: run `flysift index concepts --collection {collection}` "
                        "(after every `flysift index corpus`) to search term:.", code="concepts_missing", status=409,
                        details={"collection": collection})


def _pages(request: Request, index: str, query: dict[str, Any], source: list[str]) -> Iterator[dict[str, Any]]:
    after = None
    while True:
        body: dict[str, Any] = {"query": query, "size": PAGE, "sort": [{"seq": "asc"}], "_source": source,
                                "track_total_hits": False}
        if after is not None:
            body["search_after"] = after
        hits = request("POST", f"/{index}/_search", body, what="reading the concept index")["hits"]["hits"]
        yield from hits
        if len(hits) < PAGE:
            return
        after = hits[-1]["sort"]


class ConceptWriter:
    """Writes ``index``; ``done`` holds the papers an interrupted earlier run finished."""

    def __init__(self, request: Request, bulk: Callable[[str], None], index: str, alias: str, resume: bool,
                 targets: Callable[[str], list[str]]):
        self.request, self.bulk, self.index, self.alias, self.targets = request, bulk, index, alias, targets
        exists = self._exists()
        if exists and not resume:
            request("DELETE", f"/{index}", what="dropping an unfinished concept index")
            exists = False
        if not exists:
            request("PUT", f"/{index}", {"settings": {"number_of_shards": 1, "number_of_replicas": 0,
                                                      "refresh_interval": "-1"}, "mappings": MAPPING},
                    what=f"creating {index}")
        self.done: set[str] = set()
        self.seq = 0
        if exists:
            request("POST", f"/{index}/_refresh", what="refresh")
            for h in _pages(request, index, {"term": {"kind": "done"}}, ["pmcid", "seq"]):
                self.done.add(h["_source"]["pmcid"])
            top = request("POST", f"/{index}/_search", {"size": 0, "aggs": {"seq": {"max": {"field": "seq"}}}})
            self.seq = int(top.get("aggregations", {}).get("seq", {}).get("value") or 0) + 1
        self._lines: list[str] = []

    def _exists(self) -> bool:
        try:
            self.request("GET", f"/{self.index}", what="looking for an unfinished concept index")
            return True
        except FlysiftError as e:   # a missing index is index_missing (503) or not_found (404)
            if e.code in ("not_found", "index_missing"):
                return False
            raise

    def add(self, pmcid: str, rows: Iterable[Row]) -> None:
        """One paper's mentions; a paper added again replaces its mentions (documents keyed by passage and order)."""
        import json

        if pmcid in self.done:
            self.request("POST", f"/{self.index}/_delete_by_query", {"query": {"bool": {"filter": [
                {"term": {"pmcid": pmcid}}, {"term": {"kind": "mention"}}]}}}, params={"refresh": "true"},
                what="replacing a paper's mentions")
        for n, (passage, term, start, end, text, via, closure) in enumerate(rows):
            doc = {"kind": "mention", "pmcid": pmcid, "passage": passage, "term": term, "start": start, "end": end,
                   "text": text, "via": via, "closure": list(dict.fromkeys(closure)), "seq": self._next()}
            self._lines.append(json.dumps({"index": {"_id": f"{passage}#{n}"}}))
            self._lines.append(json.dumps(doc, ensure_ascii=False))
        self._lines.append(json.dumps({"index": {"_id": f"done:{pmcid}"}}))
        self._lines.append(json.dumps({"kind": "done", "pmcid": pmcid, "seq": self._next()}))
        self.done.add(pmcid)
        if len(self._lines) >= 4000:
            self.commit()

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def commit(self) -> None:
        if self._lines:
            self.bulk("\n".join(self._lines) + "\n")
            self._lines = []

    def publish(self, meta: dict[str, Any]) -> dict[str, Any]:
        """Make the index searchable, record ``meta`` and the counts in its ``_meta``, and move ``alias`` to it
        (older concept indices of the collection are dropped)."""
        self.commit()
        r = self.request
        r("PUT", f"/{self.index}/_settings", {"index": {"refresh_interval": None}}, what="restoring refresh")
        r("POST", f"/{self.index}/_refresh", what="refresh")
        agg = r("POST", f"/{self.index}/_search", {"size": 0, "track_total_hits": True,
                                                   "query": {"term": {"kind": "mention"}},
                                                   "aggs": {"terms": {"cardinality": {"field": "term"}}}})
        done = r("POST", f"/{self.index}/_count", {"query": {"term": {"kind": "done"}}})["count"]
        stats = r("GET", f"/{self.index}/_stats/store")["indices"][self.index]["primaries"]["store"]
        info = {**meta, "papers": done, "mentions": agg["hits"]["total"]["value"],
                "terms": int(agg["aggregations"]["terms"]["value"]), "bytes": stats["size_in_bytes"]}
        r("PUT", f"/{self.index}/_mapping", {"_meta": info}, what="recording the concept index")
        alias = self.alias
        old = self.targets(alias)
        actions = [{"remove": {"index": i, "alias": alias}} for i in old if i != self.index]
        actions.append({"add": {"index": self.index, "alias": alias}})
        r("POST", "/_aliases", {"actions": actions}, what="publishing the concept index")
        stale = [i for i in old if i != self.index]
        if stale:
            r("DELETE", "/" + ",".join(stale), what="dropping older concept indices")
        return info

    def abort(self) -> None:
        self._lines = []


class ConceptIndex:
    """Reads a published concept index through its alias."""

    def __init__(self, request: Request, alias: str, collection: str):
        self.request, self.alias, self.collection = request, alias, collection

    def counts(self, kind: Literal["papers", "passages"], term_ids: Sequence[str]) -> dict[str, int]:
        ids = list(dict.fromkeys(term_ids))[:MAX_CONCEPT_IDS]
        if not ids:
            return {}
        field = "pmcid" if kind == "papers" else "passage"
        out: dict[str, int] = {}
        query = {"bool": {"filter": [{"term": {"kind": "mention"}}, {"terms": {"closure": ids}}]}}
        for h in _pages(self.request, self.alias, query, [field]):
            key = h["_source"][field]
            out[key] = out.get(key, 0) + 1
        return out

    def mentions(self, kind: Literal["papers", "passages"], keys: Sequence[str], term_ids: Sequence[str],
                 per_key: int = 3) -> dict[str, list[ConceptMention]]:
        ids = list(dict.fromkeys(term_ids))[:MAX_CONCEPT_IDS]
        out: dict[str, list[ConceptMention]] = {k: [] for k in keys}
        if not ids or not keys:
            return out
        field = "pmcid" if kind == "papers" else "passage"
        query = {"bool": {"filter": [{"term": {"kind": "mention"}}, {"terms": {"closure": ids}},
                                     {"terms": {field: list(keys)}}]}}
        for h in _pages(self.request, self.alias, query, ["pmcid", "passage", "term", "start", "end", "text", "via",
                                                          "closure"]):
            s = h["_source"]
            bucket = out[s[field]]
            if len(bucket) < per_key:
                matched = next((i for i in ids if i in s["closure"]), ids[0])
                bucket.append(ConceptMention(term_id=s["term"], matched=matched, passage_id=s["passage"],
                                             start=s["start"], end=s["end"], text=s["text"], via=s["via"]))
        return out

    def of_paper(self, pmcid: str) -> list[ConceptMention]:
        """Every mention in a paper, in text order (``matched`` is the term itself)."""
        query = {"bool": {"filter": [{"term": {"kind": "mention"}}, {"term": {"pmcid": pmcid}}]}}
        return [ConceptMention(term_id=s["term"], matched=s["term"], passage_id=s["passage"], start=s["start"],
                               end=s["end"], text=s["text"], via=s["via"])
                for s in (h["_source"] for h in _pages(self.request, self.alias, query,
                                                       ["passage", "term", "start", "end", "text", "via"]))]
