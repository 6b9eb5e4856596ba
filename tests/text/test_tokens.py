"""search.text.tokens: every backend indexes exactly the tokens the query side analyses (``analysis.analyze``).

The Python backend always runs; the native one (``flysift_native``) when it is installed. Both are compared with
tantivy's analyzers on the gene-symbol hazards, on Unicode edge cases, and on a few thousand seeded random texts.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import types
from collections.abc import Callable

import pytest

from search.text import analysis, tokens

NATIVE_MISSING = "flysift_native is not installed: pip install ./native (needs cargo)"

Backend = dict[str, Callable[[str], str]]


@pytest.fixture(params=["python", "native"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "python":
        return {"word": tokens._python_word_text, "symbol": tokens._python_symbol_text}
    native = pytest.importorskip("flysift_native", reason=NATIVE_MISSING)
    return {"word": native.word_text, "symbol": native.symbol_text}


def expected(view: str, text: str) -> str:
    return " ".join(analysis.analyze(view, text))


HAZARDS = [
    "Su(H)", "(Su(H)),", "E(spl)m8-HLH", "l(2)gl", "Df(3L)ED4543", "α-Cat", "abd-A", "Dl", "dl", "Dl and dl", "N",
    "Su(H", "a(b", "x-", "1.2.3", "a()b", "a(+)b", "a(b)(c)d", "a(b)c(d", "a-(b)", "a--b", "a.-b", "p53/Mdm2",
    "GAL4:UAS", "Ser+/- flies", "wg-lacZ.", "Notch-Delta signalling, (N) [Dl]; {Ser}", "cell-cycle.", "H3K27me3",
    "Df(2R)BSC29/CyO", "(E(spl)-C)", "Su(var)3-9", "mir-279.", "X:Y", ":a", "a:", "a/", "/a", "a+", "+a",
    # Unicode: CJK, combining marks, Greek, Turkish İ, German ß, ligatures, other scripts' digits, Nl/No numbers
    "果蝇 翅膀发育", "e\u0301clair cafe\u0301", "n\u0303o", "ΑΒΓ αβγ Σίσυφος ΣΟΦΟΣ", "İstanbul ıI", "Straße STRASSE",
    "ﬁnal ﬂow ﬃ", "٣٤ ४२ ๓ ０１２ x²", "Ⅻ ⅻ ½ ①", "Привет, мир", "हिन्दी", "ไทย", "한국어", "𝐀𝐁 𐐀𐐨 😀a",
    "a\u200db a\u00adb a\u00a0b a\u2013b", "\u0301a", "a\u0301(b\u0301)c",
    # empty and whitespace only
    "", " ", "\t\n\r \u00a0\u3000",
]


def long_token_cases() -> list[str]:
    """Tokens around tantivy's 64-byte limit, in one-, two-, three- and four-byte letters and in symbol shapes."""
    cases = []
    for letter in ("a", "é", "α", "果", "𝐀"):
        width = len(letter.encode())
        for size in range(60 // width, 68 // width + 1):
            run = letter * size
            cases += [run, f"x {run} y", f"{run}-b", f"Su({run})", f"{run[:-1]}1.2", f"(({run}))"]
    cases += ["a" * 30 + "-" + "b" * 33, "a" * 31 + "-" + "b" * 32, "İ" * 31 + "x", "İ" * 32, "ß" * 32, "ß" * 31 + "s"]
    return cases


@pytest.mark.parametrize("view", ["word", "symbol"])
def test_hazards_and_unicode_edges_equal_analyze(backend: Backend, view: str) -> None:
    for text in HAZARDS + long_token_cases():
        assert backend[view](text) == expected(view, text), (view, text)


def test_symbol_view_keeps_gene_shapes(backend: Backend) -> None:
    symbol = backend["symbol"]
    assert symbol("(Su(H)), E(spl)m8-HLH and l(2)gl.") == "Su(H) E(spl)m8-HLH and l(2)gl"
    assert symbol("Dl dl N α-Cat abd-A Df(3L)ED4543") == "Dl dl N α-Cat abd-A Df(3L)ED4543"
    assert symbol("Su(H a(b x- 1.2.3") == "Su H a b x 1.2.3"
    assert backend["word"]("Dogs are RUNNING, Su(H)") == "dog are run su h"


def test_long_tokens_are_dropped_from_64_bytes(backend: Backend) -> None:
    for view in ("word", "symbol"):
        assert backend[view]("a" * 63 + " b") == "a" * 63 + " b"
        assert backend[view]("a" * 64 + " b") == "b"
        # 32 two-byte letters are 64 bytes: dropped though only 32 characters; 31 and an ASCII letter are kept
        assert backend[view]("é" * 32 + " b") == "b"
        assert backend[view]("é" * 31 + "x b").endswith("x b")


def random_texts(count: int, seed: int = 7) -> list[str]:
    """Seeded texts mixing ASCII, Greek, punctuation, gene shapes and characters of many Unicode categories."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    greek = "αβγδεζηθικλμνξοπρσςτυφχψωΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩάέήίόύώ"
    punct = "()()[]{}-+/:.,;!?'\"*&%$#@=<>|\\_~^`"
    other = ("\u0301\u0308\u0345\u093f\u0e31"  # combining marks (Mn, Mc; U+0345 and U+093F are Alphabetic, not L)
             "果蝇翅膀한국ไทยПриветßİıﬁﬂ"  # CJK, Hangul, Thai, Cyrillic, ß, Turkish i's, ligatures
             "٣४๓０²½Ⅻⅻ①"  # digits of other scripts (Nd), No and Nl numbers
             "\u00a0\u2009\u3000\u200b\u200d\u00ad\u2013\u2014\u00d7\u2212"  # spaces, format chars, dashes
             "𝐀𐐀😀\U0001f9ec")  # astral letters and symbols
    shapes = ["Su(H)", "E(spl)m8-HLH", "l(2)gl", "Df(3L)ED4543", "α-Cat", "abd-A", "Dl", "N", "(", ")", "-", "."]
    pools = [letters, greek, punct, other, " \t\n"]
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 12)):
            kind = rng.random()
            if kind < 0.15:
                parts.append(rng.choice(shapes))
            elif kind < 0.25:  # a run long enough to reach the 64-byte limit
                parts.append("".join(rng.choice(letters + greek) for _ in range(rng.randint(20, 70))))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
        texts.append(rng.choice(["", " "]).join(parts))
    return texts


@pytest.mark.parametrize("view", ["word", "symbol"])
def test_random_texts_equal_analyze(backend: Backend, view: str) -> None:
    texts = random_texts(3000)
    assert sum(bool(expected(view, t)) for t in texts) > 2000  # the generator yields tokens, not only separators
    for text in texts:
        assert backend[view](text) == expected(view, text), (view, text)


def test_a_large_text_equals_analyze(backend: Backend) -> None:
    text = "\n".join(random_texts(2000, seed=11))
    for view in ("word", "symbol"):
        assert backend[view](text) == expected(view, text)


def test_more_distinct_words_than_the_stem_cache_holds(backend: Backend) -> None:
    # the native backend remembers 100,000 stems per thread and starts again when full: the answers must not change
    words = [f"{stem}{i:x}ing" for i in range(60_000) for stem in ("walk", "Walk")]
    text = " ".join(words)
    assert backend["word"](text) == expected("word", text)
    assert backend["word"](text[:5_000]) == expected("word", text[:5_000])


def test_lone_surrogates_are_refused_by_the_word_view(backend: Backend) -> None:
    # tantivy refuses text that is not UTF-8; a backend must not index what the query side cannot analyse
    with pytest.raises(UnicodeEncodeError):
        backend["word"]("a\ud800b")


def test_view_text_uses_the_loaded_backend() -> None:
    assert tokens.view_text("word", "Flies RUN") == tokens.word_text("Flies RUN") == "fli run"
    assert tokens.view_text("symbol", "Su(H)-mediated") == tokens.symbol_text("Su(H)-mediated") == "Su(H)-mediated"


def test_native_is_used_when_installed() -> None:
    pytest.importorskip("flysift_native", reason=NATIVE_MISSING)
    assert tokens.BACKEND == "native"


def test_a_native_build_for_another_tantivy_falls_back_to_python(monkeypatch: pytest.MonkeyPatch) -> None:
    stale = types.ModuleType("flysift_native")
    stale.TANTIVY_VERSION = "0.1.0"  # type: ignore[attr-defined]
    stale.MAX_TOKEN_BYTES = analysis.MAX_TOKEN_CHARS  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flysift_native", stale)
    with pytest.warns(RuntimeWarning, match="pip install ./native"):
        backend, word, symbol = tokens._load()
    assert (backend, word, symbol) == ("python", tokens._python_word_text, tokens._python_symbol_text)


def test_the_environment_can_force_the_python_backend():
    code = "from search.text import tokens; print(tokens.BACKEND, tokens.word_text('Flies flying'))"
    env = {**os.environ, "FLYSIFT_TOKENIZER": "python"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["python", "fli", "fli"]
