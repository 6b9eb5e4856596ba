"""The planner reads queries as people and agents write them (issue #16): shouting and title case, stop words,
context for short words, marks that force the gene reading, and the explain record."""

from __future__ import annotations

from search.engines.embedded.engine import EmbeddedEngine
from search.retrieval.planner import describe, explain, plan, query_case
from search.text.analysis import is_stop_word


def views(q):
    return [(c.text, c.view, c.boost) for c in q.clauses]


def pmcids(res):
    return [h.pmcid for h in res.hits]


# ---- item 1: shouting -------------------------------------------------------------------------------------------

def test_a_query_in_capitals_finds_what_the_lower_case_query_finds(data_dir):
    eng = EmbeddedEngine(data_dir)
    lower = pmcids(eng.search_papers(plan("wing disc growth")))
    assert lower and pmcids(eng.search_papers(plan("WING DISC GROWTH"))) == lower
    assert all(c.view == "word" for c in plan("DROSOPHILA WING DISC DEVELOPMENT").clauses)
    assert plan("DROSOPHILA WING DISC DEVELOPMENT").case == "capitals"


def test_capitals_and_title_case_keep_symbols_the_lexicon_knows_in_that_case(data_dir):
    q = plan("DL GRADIENT", known_symbols={"DL"})
    assert ("DL", "symbol", 1.0) in views(q) and ("GRADIENT", "word", 1.0) in views(q)
    title = plan("The Role Of Delta In Wing Development", known_symbols={"Delta"})
    assert title.case == "title" and ("Delta", "symbol", 1.0) in views(title)
    assert ("Wing", "word", 1.0) in views(title) and ("Role", "word", 1.0) in views(title)
    # title case leaves shapes other than the first capital alone
    assert ("GAL4", "symbol", 1.0) in views(plan("Expression Of GAL4 In The Wing"))


def test_one_shouted_word_is_a_word_that_prefers_its_exact_case():
    q = plan("DEPRESSION")
    assert q.case == "capitals" and views(q) == [("DEPRESSION", "word", 1.0), ("DEPRESSION", "symbol", 0.5)]
    assert views(plan("GAL4")) == [("GAL4", "symbol", 1.0)] and views(plan("N")) == [("N", "symbol", 1.0)]
    # short: a shouted word or an older gene symbol written in capitals; exact case first, its word at half weight
    assert views(plan("FTZ")) == [("FTZ", "symbol", 1.0), ("FTZ", "word", 0.5)]
    assert views(plan("FTZ", known_symbols={"FTZ"})) == [("FTZ", "symbol", 1.0)]   # the lexicon knows it so: exact


def test_one_short_shouted_word_finds_what_the_lower_case_word_finds(data_dir):
    eng = EmbeddedEngine(data_dir)
    for word in ("wing", "disc", "axis"):
        lower = set(pmcids(eng.search_papers(plan(word), limit=100)))
        assert lower and set(pmcids(eng.search_papers(plan(word.upper()), limit=100))) == lower, word


def test_lower_case_symbol_shapes_in_running_text_also_match_their_words():
    q = plan("high-fat meal effects")
    assert ("high-fat", "symbol", 1.0) in views(q) and ("high-fat", "word", 0.5) in views(q)
    assert views(plan("l(2)gl")) == [("l(2)gl", "symbol", 1.0)]                  # a lone symbol stays exact
    assert views(plan("iab-4")) == [("iab-4", "symbol", 1.0)]
    assert ("african-american", "word", 0.5) in views(plan("african-american"))   # letters and hyphens only: prose


def test_symbol_queries_are_not_mistaken_for_shouting_or_titles():
    assert query_case(["Dl", "N"]) == "as written" and query_case(["Dl", "Su(H)", "Notch"]) == "as written"
    assert [(c.text, c.view) for c in plan("Dl N").clauses] == [("Dl", "symbol"), ("N", "symbol")]
    assert [(c.text, c.view) for c in plan("Su(H) GAL4").clauses] == [("Su(H)", "symbol"), ("GAL4", "symbol")]


# ---- item 2: short words, stop words -------------------------------------------------------------------------------

def test_stop_words_are_neither_symbol_clauses_nor_kept_in_longer_queries():
    q = plan("role of the dl gradient in the embryo")
    assert [c.text for c in q.clauses if c.view == "symbol"] == []       # running text: no exact-case clauses
    assert [c.text for c in q.clauses if c.view == "word"] == ["role", "dl", "gradient", "embryo"]
    assert q.dropped == ["of", "the", "in", "the"] and describe(q)["dropped"] == q.dropped
    # the lexicon knows dl in lower case: then it is the symbol, in running text too
    known = plan("role of the dl gradient in the embryo", known_symbols={"dl"})
    assert [c.text for c in known.clauses if c.view == "symbol"] == ["dl"]
    # a short query keeps the half-weight exact-case clause of short words (dl ranks exact-case mentions first)
    assert views(plan("dl gradient")) == [("dl", "word", 1.0), ("dl", "symbol", 0.5), ("gradient", "word", 1.0)]
    assert views(plan("of the")) == [("of", "word", 1.0), ("the", "word", 1.0)]


def test_stop_words_stay_in_short_queries_and_phrases():
    assert [c.text for c in plan("the dl").clauses if c.view == "word"] == ["the", "dl"]
    assert [c.text for c in plan("the").clauses] == ["the"]
    q = plan('"the wing of the fly" growth of cells')
    assert q.clauses[0].text == "the wing of the fly" and q.clauses[0].phrase
    assert q.dropped == ["of"]


def test_a_stop_word_named_gene_is_a_word_in_running_text_unless_marked():
    assert is_stop_word("In") and is_stop_word("the") and not is_stop_word("Dl")
    q = plan("in mutant wings", known_symbols={"in"})
    assert all(c.view == "word" for c in q.clauses) and q.dropped == ["in"]
    for marked in ("gene:in mutant wings", '"in" mutant wings'):
        q = plan(marked, known_symbols={"in"})
        assert q.clauses[0].model_dump(exclude_defaults=True) == {"text": "in", "view": "symbol"}, marked
        assert "in" not in q.dropped
    assert views(plan("gene:so"))[0] == ("so", "symbol", 1.0)
    assert views(plan("gene:Dl, wing"))[0] == ("Dl", "symbol", 1.0)


def test_stop_words_do_not_change_what_a_natural_language_query_finds(data_dir):
    eng = EmbeddedEngine(data_dir)
    assert pmcids(eng.search_papers(plan("growth of the wing disc")))[0] == "PMC100004"
    # Dl still exact: the sentence finds the Delta paper, not the dorsal one
    assert pmcids(eng.search_papers(plan("What is the role of Dl in the wing?")))[0] == "PMC100001"


# ---- explain --------------------------------------------------------------------------------------------------------

def test_explain_says_where_each_token_went_and_why():
    text = "What is the role of Dl in WING margin?"
    q = plan(text, expansions=["Delta"])
    ex = explain(text, q, bm25={"k1": 1.2, "b": 0.75})
    by_token = {t["token"]: t for t in ex["tokens"]}
    assert by_token["Dl"]["view"] == "symbol" and by_token["Dl"]["why"] == "symbol shape"
    assert by_token["the"]["view"] == "dropped" and ex["dropped"] == ["is", "the", "of", "in"]
    assert by_token["margin"]["view"] == "word" and ex["expanded"] == ["Delta"] and ex["bm25"]["k1"] == 1.2
    assert ex["case"] == "as written"


def test_service_explains_paper_and_passage_searches_on_request(settings):
    from search.retrieval.service import SearchService

    svc = SearchService(settings)
    res = svc.search_papers("WING DISC GROWTH", explain_plan=True)
    ex = res.query["explain"]
    assert ex["case"] == "capitals" and ex["bm25"]["field_weights"]["title"] == 2.0 and ex["bm25"]["k1"] > 0
    assert [t["view"] for t in ex["tokens"]] == ["word", "word", "word"]
    assert res.hits and res.query["case"] == "capitals"
    passages = svc.search_passages("growth of the wing disc", explain_plan=True)
    ex = passages.query["explain"]
    assert ex["dropped"] == ["of", "the"] and ex["bm25"]["field_weights"] == {"text": 1.0}
    assert "explain" not in svc.search_papers("wing").query                     # only when asked


def test_explain_is_a_request_flag_of_paper_and_passage_search(live_server):
    import httpx

    for path in ("/v1/papers/search", "/v1/passages/search"):
        r = httpx.post(live_server.url + path, json={"query": "What is the role of Dl in the wing?", "explain": True})
        assert r.status_code == 200, r.text
        ex = r.json()["query"]["explain"]
        assert {"token": "Dl", "view": "symbol", "why": "symbol shape"} in ex["tokens"] and "k1" in ex["bm25"]
        plain = httpx.post(live_server.url + path, json={"query": "wing"}).json()["query"]
        assert "explain" not in plain
    bad = httpx.post(live_server.url + "/v1/papers/search", json={"query": "wing", "explain": "maybe"})
    assert bad.status_code == 422


# ---- older gene names (#15): a number in a name ---------------------------------------------------------------------

def _older_name_papers():
    """A paper naming wg by an older name with a number, papers with that number in their titles, and others."""
    from search.core.models import Paper, Section

    def paper(n, title, abstract, body):
        return Paper(pmcid=f"PMC2000{n:02d}", year=2000 + n, journal="Development", title=title, abstract=abstract,
                     sections=[Section(type="RESULTS", paragraphs=[body])])

    wg = paper(0, "Segment polarity in the embryonic epidermis", "wg is secreted by stripes of cells.",
               "Wnt oncogene analog 1 is expressed in the epidermis, and cells receive the Wnt signal.")
    dlg = [paper(1 + i, f"The role of discs large 1 in {t}", f"discs large 1 (dlg1) acts in {t}.",
                 f"dlg1 mutant {t} resembles the loss of an oncogene.")
           for i, t in enumerate(("epithelial polarity", "synapse growth", "tumour suppression"))]
    other = [paper(4 + i, f"{t.capitalize()} in the wing disc", f"We studied {t} in the wing disc.",
                   f"Clones show that {t} needs the morphogen gradient.")
             for i, t in enumerate(("cell growth", "cell competition", "planar polarity", "apoptosis", "patterning"))]
    return [wg, *dlg, *other]


def test_a_number_in_a_name_is_one_word_clause_not_a_symbol_too():
    # digits have no case and no stem, so the symbol view holds the same token: a second clause counted it 1.5 times
    assert views(plan("Wnt oncogene analog 1"))[-1] == ("1", "word", 1.0)
    assert [c for c in plan("Wnt oncogene analog 1").clauses if c.text == "1"] == [plan("1").clauses[0]]
    assert explain("discs large 1", plan("discs large 1"))["tokens"][-1] == {"token": "1", "view": "word",
                                                                            "why": "number"}
    assert views(plan("BMP2/4")) == [("BMP2/4", "symbol", 1.0)]                 # letters with digits: still a symbol
    assert ("m8", "symbol", 1.0) in views(plan("Enhancer of split m8"))


def test_an_older_name_with_a_number_finds_its_gene_before_papers_full_of_that_number(tmp_path):
    from tests.helpers import build_index

    eng = build_index(tmp_path / "data", _older_name_papers())
    assert pmcids(eng.search_papers(plan("Wnt oncogene analog 1"), limit=4))[0] == "PMC200000"


# ---- English clitics (#16): the s of Parkinson's is grammar, not a query word --------------------------------------

def test_clitics_are_dropped_and_reported_but_kept_in_quoted_phrases():
    for text in ("Parkinson's disease", "parkinson 's disease", "Parkinson’s disease"):
        q = plan(text)
        assert [c.text for c in q.clauses] == [text.split("'")[0].split("’")[0].strip(), "disease"], text
        assert len(q.dropped) == 1 and q.dropped[0].endswith(("s", "S")), text
    assert explain("didn't work", plan("didn't work"))["tokens"][0] == {"token": "'t", "view": "dropped",
                                                                        "why": "clitic"}
    assert plan('"Parkinson\'s disease" risk').clauses[0].text == "Parkinson's disease"      # quoted: as written
    assert [c.text for c in plan("the 's' allele of Dl").clauses] == ["s", "allele", "Dl"]   # quoted letter: a word
    assert [c.text for c in plan("5'-UTR of Dl").clauses if c.view == "symbol"] == ["UTR", "Dl"]  # prime: no clitic


def _possessive_papers():
    from search.core.models import Paper, Section

    def paper(n, title, abstract):
        return Paper(pmcid=f"PMC3000{n:02d}", year=2001, journal="Genetics", title=title, abstract=abstract,
                     sections=[Section(type="RESULTS", paragraphs=[abstract])])

    return [paper(0, "A fly model of Parkinson disease", "Loss of parkin in flies models Parkinson disease."),
            paper(1, "The organ's size", "The wing's size, the haltere's size and the leg's size follow the fly's "
                                         "growth; the disc's cells set each organ's shape.")]


def test_a_possessive_does_not_retrieve_papers_that_share_only_possessives(tmp_path):
    from tests.helpers import build_index

    eng = build_index(tmp_path / "data", _possessive_papers())
    for text in ("Parkinson's disease", "what's the model of parkinson 's disease?"):
        assert pmcids(eng.search_papers(plan(text), limit=5)) == ["PMC300000"], text


# ---- older names in another case (#15): Hh finds the papers that write hh, Dl never finds dl ------------------------

def _lexicon():
    from search.core.models import Gene
    from search.text.lexicon import Lexicon

    return Lexicon([Gene(id="FBgn0004644", symbol="hh", fullname="hedgehog", symbol_synonyms=["Hh", "bar-3"]),
                    Gene(id="FBgn0260632", symbol="dl", fullname="dorsal", symbol_synonyms=["Dorsal", "DL"]),
                    Gene(id="FBgn0000463", symbol="Dl", fullname="Delta", symbol_synonyms=["DI"]),
                    Gene(id="FBgn0004647", symbol="N", fullname="Notch"),
                    Gene(id="FBgn0000577", symbol="en", symbol_synonyms=["En", "ci-D"]),
                    Gene(id="FBgn0004859", symbol="ci", symbol_synonyms=["Ci", "ci-D"])])


def test_the_lexicon_folds_only_genes_it_writes_in_several_cases_and_no_other_gene_shares():
    fold = _lexicon().foldable()
    assert {"hh", "en", "ci"} <= fold
    assert not {"dl", "n", "di", "ci-d", "bar-3"} & fold      # dl/Dl two genes; N, DI one spelling; ci-D two genes


def test_a_foldable_symbol_also_matches_its_other_cases_at_half_weight():
    fold = _lexicon().foldable()
    assert views(plan("Hh", foldable=fold)) == [("Hh", "symbol", 1.0), ("Hh", "word", 0.5)]
    assert views(plan("Dl", foldable=fold)) == [("Dl", "symbol", 1.0)] and views(plan("N", foldable=fold)) == [
        ("N", "symbol", 1.0)]
    assert views(plan("Hh")) == [("Hh", "symbol", 1.0)]                          # no lexicon: exact case only
    assert ("Hh", "symbol", 1.0) in views(plan("Hh signalling in the wing", foldable=fold))
    tokens = explain("Hh", plan("Hh", foldable=fold), foldable=fold)["tokens"]
    assert tokens == [{"token": "Hh", "view": "symbol", "why": "symbol shape", "case_folded": 0.5}]


def test_a_foldable_older_name_finds_papers_that_write_the_gene_in_another_case(tmp_path):
    from search.core.models import Paper, Section
    from tests.helpers import build_index

    def paper(n, text):
        return Paper(pmcid=f"PMC4000{n:02d}", year=2001, journal="Genetics", title=f"Paper {n}", abstract=text,
                     sections=[Section(type="RESULTS", paragraphs=[text])])

    eng = build_index(tmp_path / "data", [paper(0, "hh is expressed in the posterior compartment."),
                                          paper(1, "Hh protein moves to the anterior cells."),
                                          paper(2, "Delta: Dl signals to the wing margin."),
                                          paper(3, "dl is a Rel-family factor; n = 12 embryos.")])
    fold = _lexicon().foldable()
    assert pmcids(eng.search_papers(plan("Hh"))) == ["PMC400001"]
    assert pmcids(eng.search_papers(plan("Hh", foldable=fold))) == ["PMC400001", "PMC400000"]  # exact case first
    assert pmcids(eng.search_papers(plan("Dl", foldable=fold))) == ["PMC400002"]
    assert pmcids(eng.search_papers(plan("N", foldable=fold))) == []


def test_the_service_passes_the_lexicons_fold_set_to_the_planner(settings):
    from search.retrieval.service import SearchService

    svc = SearchService(settings)
    for search in (svc.search_papers, svc.search_passages):
        res = search("Hh", foldable=frozenset({"hh"}), explain_plan=True)
        assert res.query["explain"]["tokens"][0]["case_folded"] == 0.5
        assert {"text": "Hh", "phrase": True, "boost": 0.5} in res.query["clauses"]
