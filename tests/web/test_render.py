"""The page helpers' marking: the plain-string escape it uses per piece is markupsafe's, character for character."""

from __future__ import annotations

import pytest
from markupsafe import Markup, escape

from search.web.render import _escaped, mark, marked

TEXTS = ["", "plain", "<script>alert('x')</script>", 'a "quoted" & <b>', "&amp; already", "α-Cat < Su(H) > dl",
         "'\"&<>" * 3, "\u00a0\u2003\n\t", "\ue000tag\ue001"]


@pytest.mark.parametrize("text", TEXTS)
def test_the_plain_escape_is_markupsafes(text):
    assert _escaped(text) == str(escape(text))


def test_marks_wrap_escaped_pieces():
    text = "<Dl> & \"dl\" in 'Dl'"
    out = mark(text, [(1, 3)], more=[(16, 18, "g")], terms=[(7, 11, "GO:1", 'a "name"')])
    assert isinstance(out, Markup)
    assert out == ('&lt;<mark class="q">Dl</mark>&gt; &amp; <a class="t" href="/terms/GO:1" title="GO:1 a &#34;name'
                   '&#34;">&#34;dl&#34;</a> in &#39;<mark class="g">Dl</mark>&#39;')
    assert mark(text) == escape(text)


def test_names_win_over_the_same_span_as_a_word():
    out = marked("dl and Dl", {"highlights": [(0, 2), (7, 9)], "names": [(7, 9)]})
    assert out == '<mark class="q">dl</mark> and <mark class="g">Dl</mark>'


def test_markup_text_is_not_escaped_again():
    assert mark(Markup("<b>Dl</b>"), [(3, 5)]) == '<b><mark class="q">Dl</mark></b>'
