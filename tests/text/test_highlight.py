"""Issue #26 item 3: highlight fragments as Elasticsearch makes them: tags, fragment size and count, whole words,
escaping; the two views (``Dl`` never marks ``dl``)."""

from __future__ import annotations

from search.core.models import Passage
from search.core.query import Clause, HighlightSpec
from search.text.analysis import stem
from search.text.highlight import Highlighters, fragments, paper_highlight, passage_highlight
from search.text.snippets import Highlighter

LONG = ("Morphogenesis of the wing disc depends on Dpp. " + "Cells proliferate in the pouch while the hinge grows. " * 6
        + "Late in development Dpp and Wg refine the margin. " + "Nothing else happens here at all. " * 6
        + "Finally Dpp spreads again.")


def hl(*clauses: Clause) -> Highlighter:
    return Highlighter(list(clauses), stem)


def test_fragments_hold_the_most_matches_at_word_boundaries_in_text_order():
    spec = HighlightSpec(fragment_size=60, number_of_fragments=2)
    frags = fragments(hl(Clause(text="Dpp", view="symbol"), Clause(text="Wg", view="symbol")), LONG, spec)
    assert len(frags) == 2
    assert "<em>Dpp</em> and <em>Wg</em>" in frags[1] and LONG.index("Late") > LONG.index("Morphogenesis")
    assert "wing disc depends on <em>Dpp</em>. Cells" in frags[0]   # the match with context on both sides
    for f in frags:
        plain = f.replace("<em>", "").replace("</em>", "")
        assert plain in LONG and len(plain) <= 60 + 20
        start = LONG.index(plain)
        assert start == 0 or LONG[start - 1] == " "          # starts at a word
        end = start + len(plain)
        assert end == len(LONG) or LONG[end] == " "          # ends at one: never morphogene|sis


def test_zero_fragments_is_the_whole_field_and_tags_are_configurable():
    spec = HighlightSpec(pre_tag="**", post_tag="**", number_of_fragments=0)
    assert fragments(hl(Clause(text="wing")), "The Wing and the wings", spec) == ["The **Wing** and the **wings**"]
    assert fragments(hl(Clause(text="Dl", view="symbol")), "dl and Dl", spec) == ["dl and **Dl**"]
    assert fragments(hl(Clause(text="Dl", view="symbol")), "only dl here", spec) == []


def test_html_encoder_escapes_the_text_around_the_tags():
    spec = HighlightSpec(encoder="html", number_of_fragments=0)
    assert fragments(hl(Clause(text="Dl", view="symbol")), "<i>Dl</i> & N", spec) == [
        "&lt;i&gt;<em>Dl</em>&lt;/i&gt; &amp; N"]
    assert fragments(hl(Clause(text="Dl", view="symbol")), "<i>Dl</i>", HighlightSpec(number_of_fragments=0)) == [
        "<i><em>Dl</em></i>"]


def test_paper_and_passage_highlights_respect_field_restrictions():
    hls = Highlighters([Clause(text="BRCA2", view="symbol", field="title"), Clause(text="repair")])
    best = Passage(id="P:2:0", pmcid="P", section_index=2, paragraph_index=0, section_type="RESULTS", start=0, end=40,
                   text="BRCA2 mutants fail at repair of breaks.")
    out, pid = paper_highlight(hls, HighlightSpec(), "BRCA2 and DNA repair", "BRCA2 binds RAD51 for repair", best)
    assert out == {"title": ["<em>BRCA2</em> and DNA <em>repair</em>"],
                   "abstract": ["BRCA2 binds RAD51 for <em>repair</em>"],
                   "passage": ["BRCA2 mutants fail at <em>repair</em> of breaks."]} and pid == "P:2:0"
    abstract_only = Highlighters([Clause(text="Dl", view="symbol", field="abstract")])
    assert passage_highlight(abstract_only, HighlightSpec(), "Dl binds N", "ABSTRACT") == {
        "text": ["<em>Dl</em> binds N"]}
    assert passage_highlight(abstract_only, HighlightSpec(), "Dl binds N", "RESULTS") == {}
