"""``any_of`` (search.engines.embedded.match): the documents holding any of the values, whichever form it takes."""

from __future__ import annotations

import tantivy

from search.engines.embedded.match import TERMS_AS_DISJUNCTION, any_of


def _index(n: int) -> tantivy.Index:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("key", stored=True, tokenizer_name="raw")
    index = tantivy.Index(sb.build())
    w = index.writer(heap_size=15_000_000, num_threads=1)
    for i in range(n):
        w.add_document(tantivy.Document(key=f"K{i}"))
        if i % 50 == 0:
            w.add_document(tantivy.Document(key=f"K{i}"))   # a value held by two documents
    w.commit()
    w.wait_merging_threads()
    index.reload()
    return index


def test_any_of_finds_what_a_term_set_finds_for_one_few_and_many_values():
    index = _index(500)
    searcher, schema = index.searcher(), index.schema

    def found(q: tantivy.Query) -> list[str]:
        return sorted(searcher.doc(a)["key"][0] for _, a in searcher.search(q, limit=1000, count=False).hits)

    for values in (["K3"], ["K0", "K7", "nope"], [f"K{i}" for i in range(0, 500, 3)], ["nope"],
                   [f"K{i}" for i in range(TERMS_AS_DISJUNCTION + 1)]):
        want = found(tantivy.Query.term_set_query(schema, "key", values))
        assert found(any_of(schema, "key", values)) == want, values[:3]
    assert found(any_of(schema, "key", ["K50"])) == ["K50", "K50"]
