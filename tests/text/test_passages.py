"""Passage splitting: ids, exact offsets (unicode included), sizes, sentence boundaries, determinism."""

from __future__ import annotations

import itertools
import random

import pytest

from search.core.models import Paper, Section
from search.text.passages import abstract_paragraphs, sentence_spans, split_paragraph, split_passages


def _paragraph_of(paper: Paper, passage) -> str:
    if passage.section_index == 0:
        return abstract_paragraphs(paper.abstract)[passage.paragraph_index]
    return paper.sections[passage.section_index - 1].paragraphs[passage.paragraph_index]


def _sentences(n: int, rng: random.Random, words=("Notch", "signalling", "in", "the", "wing", "disc", "α-Cat",
                                                   "Su(H)", "binds", "dpp", "mutant", "embryos", "5′-UTR")) -> str:
    out = []
    for _ in range(n):
        k = rng.randint(3, 25)
        sentence = " ".join(rng.choice(words) for _ in range(k))
        out.append(sentence[0].upper() + sentence[1:] + rng.choice([".", ".", "!", "?"]))
    return " ".join(out)


def test_ids_sections_and_abstract_parts():
    paper = Paper(pmcid="PMC1", year=2001, title="T", abstract="First part.\n\n  Second part. \n\n",
                  sections=[Section(type="INTRO", paragraphs=["Intro one.", "   ", "Intro three."]),
                            Section(type="FIG", title="Figure 1", paragraphs=["A caption."])])
    passages = split_passages(paper)
    assert [p.id for p in passages] == ["PMC1:0:0", "PMC1:0:1", "PMC1:1:0", "PMC1:1:2", "PMC1:2:0"]
    assert [p.section_type for p in passages] == ["ABSTRACT", "ABSTRACT", "INTRO", "INTRO", "FIG"]
    assert passages[1].text == "Second part."
    assert all(p.year == 2001 and p.pmcid == "PMC1" for p in passages)
    for p in passages:
        assert _paragraph_of(paper, p)[p.start:p.end] == p.text


def test_offsets_hold_on_unicode_and_untrimmed_text():
    rng = random.Random(7)
    words = ("Δ", "β-galactosidase", "𝛼-tubulin", "日本語", "naïve", "e\u0301clair", "🪰", "Dl", "l(2)gl", "x")
    paragraphs = ["  " + _sentences(rng.randint(1, 60), rng, words) + " \n " for _ in range(40)]
    paper = Paper(pmcid="PMC2", abstract="\n\n".join(paragraphs[:3]), sections=[Section(type="RESULTS",
                                                                                        paragraphs=paragraphs)])
    passages = split_passages(paper, max_words=40)
    assert any(p.id.count(".") == 1 for p in passages), "some paragraphs must have been split"
    for p in passages:
        assert _paragraph_of(paper, p)[p.start:p.end] == p.text
        assert p.text == p.text.strip() and p.text


def test_long_paragraph_pieces_cover_every_word_in_order():
    rng = random.Random(3)
    for _ in range(30):
        para = _sentences(rng.randint(20, 120), rng)
        pieces = split_paragraph(para, max_words=50)
        words = [w for a, b in pieces for w in para[a:b].split()]
        assert words == para.split()
        assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(pieces))
        assert all(len(para[a:b].split()) <= 50 for a, b in pieces)  # every sentence here is under 50 words


def test_split_ids_and_sizes_at_300_words():
    rng = random.Random(11)
    para = _sentences(120, rng)
    total = len(para.split())
    paper = Paper(pmcid="PMC3", sections=[Section(type="DISCUSS", paragraphs=[para])])
    passages = split_passages(paper)
    assert total > 900
    assert [p.id for p in passages][:3] == ["PMC3:1:0", "PMC3:1:0.1", "PMC3:1:0.2"]
    sizes = [len(p.text.split()) for p in passages]
    assert sum(sizes) == total and max(sizes) <= 300 and min(sizes) >= 100
    assert len(passages) <= -(-total // 300) + 1


def test_sentence_longer_than_twice_max_is_cut_at_words():
    para = "Intro sentence here. " + " ".join(f"w{i}" for i in range(130)) + ". Tail sentence."
    pieces = split_paragraph(para, max_words=50)
    sizes = [len(para[a:b].split()) for a, b in pieces]
    assert max(sizes) <= 50 and sum(sizes) == len(para.split())


def test_sentence_between_max_and_twice_max_stays_whole():
    long_sentence = "Long " + " ".join(["word"] * 69) + "."
    para = f"Short one. {long_sentence} Another short one."
    pieces = [para[a:b] for a, b in split_paragraph(para, max_words=50)]
    assert long_sentence in pieces


@pytest.mark.parametrize("text, expected", [
    ("Shown before (Fig. 2). Then more.", ["Shown before (Fig. 2).", "Then more."]),
    ("Many genes, e.g. Notch, act. As shown by Smith et al. This works.",
     ["Many genes, e.g. Notch, act.", "As shown by Smith et al. This works."]),
    ("In D. melanogaster and approx. 5 species. [1] Next? (Yes) ok! 3 flies.",
     ["In D. melanogaster and approx. 5 species.", "[1] Next?", "(Yes) ok!", "3 flies."]),
    ("Values of 0.5 mM.\nα-Cat binds.", ["Values of 0.5 mM.\nα-Cat binds."]),
    ('He said "stop." Then left.', ['He said "stop."', "Then left."]),
])
def test_sentence_spans(text, expected):
    assert [text[a:b] for a, b in sentence_spans(text)] == expected


def test_deterministic_and_rejects_bad_max_words():
    rng = random.Random(5)
    paper = Paper(pmcid="PMC4", abstract=_sentences(80, rng), sections=[Section(type="INTRO",
                                                                                paragraphs=[_sentences(90, rng)])])
    assert split_passages(paper, 60) == split_passages(paper.model_copy(deep=True), 60)
    with pytest.raises(ValueError):
        split_passages(paper, 0)
