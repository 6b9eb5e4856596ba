"""Types of the compiled module (native/src/lib.rs): search.text.tokens' optional backend."""

#: tantivy's RemoveLongFilter limit: a token of this many UTF-8 bytes or more is dropped
MAX_TOKEN_BYTES: int
#: the tantivy-py release whose stemmer and Unicode tables the scanners mirror
TANTIVY_VERSION: str
__version__: str

def word_text(text: str) -> str:
    """The word view's tokens of ``text`` (lower-cased, English-stemmed), joined by single spaces."""

def symbol_text(text: str) -> str:
    """The symbol view's tokens of ``text`` (gene-symbol shapes, case kept), joined by single spaces."""
