"""The coverage reasons' one home (``search.flyaoc.coverage``), without a service: the paper lookup and the ranker
are plain functions, so every reason can be reached and the ranker's calls counted."""

from __future__ import annotations

from search.flyaoc.coverage import NOT_RANKED, REASONS, detail_text, follow, gene_reasons


def _trace() -> dict:
    return {"events": [
        {"seq": 1, "tool": "search_papers", "arguments": {"body": {"query": "Dl wing", "gene": "Dl", "offset": 10}},
         "returned_ids": ["PMC1", "PMC2", "PMC2"]},
        {"seq": 2, "tool": "get_paper", "arguments": {"pmcid": "PMC1"}, "returned_ids": ["PMC1"]},
        {"seq": 3, "tool": "get_paper", "arguments": {"pmcid": "PMC5"}, "returned_ids": [],
         "error": {"code": "budget_exhausted"}},
        {"seq": 4, "tool": "get_paper", "arguments": {"pmcid": "PMC6"}, "returned_ids": ["PMC6"]}]}


def test_every_reason_from_one_trace():
    heads = {p: (f"title {p}", 2000 + i) for i, p in enumerate(["PMC1", "PMC2", "PMC3", "PMC4", "PMC6"])}
    asked: list[tuple[str, dict, set]] = []

    def ranks(policy: str, request: dict, wanted: set[str]) -> dict[str, int]:
        asked.append((policy, request, set(wanted)))
        return {"PMC3": 40} if policy == "full" else {}

    record = {"output": {"task1_function": [{"go_id": "GO:1", "evidence": {"pmcid": "PMC1"}}]}}
    g = gene_reasons("FBgn1", "Dl", ["PMC1", "PMC2", "PMC3", "PMC4", "PMC6", "PMC9"], _trace(), "t", record,
                     budget=16, run_policy="snapshot", policies=["none", "full"], paper=heads.get, ranks=ranks)
    reasons = {r["pmcid"]: r["reason"] for r in g["references"]}
    assert reasons == {"PMC1": "read_and_cited", "PMC2": "surfaced_not_read", "PMC3": "beyond_budget",
                       "PMC4": "never_retrieved", "PMC6": "read_not_annotated", "PMC9": "not_indexed"}
    assert set(g["counts"]) == set(REASONS) and sum(g["counts"].values()) == 6
    refs = {r["pmcid"]: r for r in g["references"]}
    assert refs["PMC2"]["detail"] == {"call": 1, "tool": "search_papers", "query": "Dl wing", "rank": 12}
    assert refs["PMC3"]["detail"] == {"best_rank": 40, "query": "Dl", "policy": "full", "from": "ceiling",
                                      "within_budget": False}
    assert refs["PMC9"]["title"] is None and refs["PMC1"]["title"] == "title PMC1"
    # the run's own search is asked again under the run's policy, then the ceiling queries; only unexplained papers
    assert [(p, r["query"]) for p, r, _ in asked] == [("snapshot", "Dl wing"), ("none", "Dl"), ("full", "Dl")]
    assert all(w == {"PMC3", "PMC4"} for _, _, w in asked)
    assert detail_text("beyond_budget", refs["PMC3"]["detail"]) == "best rank 40 (ceiling query 'Dl', policy full)"


def test_nothing_is_ranked_when_the_trace_explains_everything():
    def ranks(policy: str, request: dict, wanted: set[str]) -> dict[str, int]:
        raise AssertionError("no ranking needed")

    g = gene_reasons("FBgn1", "Dl", ["PMC1"], _trace(), "t", None, 16, "snapshot", ["none"],
                     lambda p: ("t", None), ranks)
    assert g["counts"]["read_not_annotated"] == 1 and g["not_indexed_share"] == 0.0


def test_follow_pages_until_every_wanted_paper_is_found():
    ranking = [f"PMC{i}" for i in range(1, 351)]
    pages: list[tuple[int, int]] = []

    def search(limit: int, offset: int) -> list[str]:
        pages.append((limit, offset))
        return ranking[offset:offset + limit]

    assert follow(search, {"PMC150", "PMC2"}, depth=1000) == {"PMC150": 150, "PMC2": 2}
    assert pages == [(100, 0), (100, 100)]
    pages.clear()
    assert follow(search, {"PMC999"}, depth=250) == {} and pages == [(100, 0), (100, 100), (50, 200)]


def test_without_a_ranker_unexplained_papers_are_not_ranked_and_searches_can_be_capped():
    heads = {"PMC1": ("a", 2001), "PMC4": ("b", 2002)}.get
    g = gene_reasons("FBgn1", "Dl", ["PMC1", "PMC4"], _trace(), "t", None, 16, "snapshot", ["none"], heads, None)
    assert {r["pmcid"]: r["reason"] for r in g["references"]} == {"PMC1": "read_not_annotated",
                                                                   "PMC4": NOT_RANKED}
    assert g["counts"][NOT_RANKED] == 1 and NOT_RANKED not in REASONS
    asked: list[str] = []

    def ranks(policy: str, request: dict, wanted: set[str]) -> dict[str, int]:
        asked.append(request["query"])
        return {}

    g = gene_reasons("FBgn1", "Dl", ["PMC4"], _trace(), "t", None, 16, "snapshot", ["none"], heads, ranks,
                     max_requests=0)
    assert asked == ["Dl"] and (g["searches"], g["asked_again"]) == (1, 0)
