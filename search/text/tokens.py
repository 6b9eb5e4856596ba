"""Index-side analysis done once per text, outside the engine: each view's tokens joined by single spaces.

The embedded engine indexes these strings with tantivy's whitespace tokenizer (``PRE_ANALYZED``), so a text is
analysed once (in an indexer worker process) however many fields and indices it feeds: a paper's body field is the
concatenation of its body passages' token strings. The tokens are exactly those of ``search.text.analysis.analyze``
(the query side keeps using that), so ranking does not depend on which backend produced them:

* ``native``: the optional Rust extension ``flysift_native`` (``pip install ./native``, needs cargo): hand-written
  scanners, the Snowball stemmer and the Unicode tables of the tantivy release it names (``TANTIVY_VERSION``); used
  when it is installed and names the installed tantivy, else a one-line warning and the Python backend;
* ``python``: tantivy's own word analyzer, and the symbol pattern run by the ``regex`` module (tantivy's regex
  tokenizer runs on a slow regex engine, ~3× slower here).

Tests compare the backends with each other and with ``analysis.analyze`` on the same texts.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from importlib import metadata
from typing import Any

from search.text import analysis

#: tokenizer name of pre-analysed fields (registered by the embedded engine)
PRE_ANALYZED = "fs_pre"


def _python_word_text(text: str) -> str:
    return " ".join(analysis.ANALYZERS[analysis.WORD_ANALYZER].analyze(text))


def _python_symbol_text(text: str) -> str:
    limit = analysis.MAX_TOKEN_CHARS
    # tantivy's remove_long keeps tokens shorter than the limit in UTF-8 bytes
    return " ".join(t for t in analysis._symbol_re.findall(text) if len(t) * 4 < limit or len(t.encode()) < limit)


#: environment variable that forces the pure-Python backend (``python``), e.g. to measure it beside the native one
BACKEND_ENV = "FLYSIFT_TOKENIZER"


def _load() -> tuple[str, Callable[[str], str], Callable[[str], str]]:
    if os.environ.get(BACKEND_ENV, "").strip().lower() == "python":
        return "python", _python_word_text, _python_symbol_text
    try:
        import flysift_native  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return "python", _python_word_text, _python_symbol_text
    native: Any = flysift_native
    mirrors, installed = getattr(native, "TANTIVY_VERSION", None), metadata.version("tantivy")
    if mirrors != installed or getattr(native, "MAX_TOKEN_BYTES", None) != analysis.MAX_TOKEN_CHARS:
        # another stemmer or token limit would index other tokens than the query side analyses
        warnings.warn(f"flysift_native mirrors tantivy {mirrors} but tantivy {installed} is installed: using the "
                      "Python backend (rebuild it: pip install ./native)", RuntimeWarning, stacklevel=1)
        return "python", _python_word_text, _python_symbol_text
    return "native", native.word_text, native.symbol_text


BACKEND, word_text, symbol_text = _load()


def view_text(view: str, text: str) -> str:
    """The tokens of ``text`` in ``view`` ("word" or "symbol"), space-joined, as the index stores them."""
    return word_text(text) if view == "word" else symbol_text(text)
