"""The query language people write (docs/search.md, "Query language"): one parser for REST, MCP, the client and CLI.

It turns query text into a syntax tree of what the person wrote (words, phrases, fields, operators), with the
character position of everything; ``search.retrieval.boolean`` reads that tree into the engine-neutral query. The
grammar decides, never a guess about what the text means::

    query     := or_expr
    or_expr   := and_expr ( ["OR"] and_expr )*        juxtaposition is OR, as in Elasticsearch
    and_expr  := unary ( "AND" unary )*
    unary     := ("NOT" | "-" | "+") unary | primary   "-"/"+" only when glued to what follows: -limb, +"wing disc"
    primary   := "(" or_expr ")" | field ":" value | '"' phrase '"' | word
    value     := word | '"' phrase '"' | "(" or_expr ")"  glued to the colon: title:Shh, title:(Shh OR Ihh)

What keeps free text working (the gene hazards and prose):

- ``AND``, ``OR``, ``NOT`` are operators only in capitals and as whole words; ``and`` in a sentence is a word.
- ``-`` and ``+`` are operators only at the start of a word; inside one (``abd-A``, ``E(spl)m8-HLH``, ``α-Cat``) they
  are part of it, and alone (``a - b``) they are text.
- ``(`` opens a group only at the start of a word; inside one (``Su(H)``, ``l(2)gl``) it is part of the word. ``)``
  closes the innermost open group; with no group open it is text (the ``1)`` of an enumeration).
- ``name:value`` is a field only when ``name`` is lower-case letters glued to a value; ``GO:0007219``, ``Notch:Delta``
  and ``such: 1)`` stay text. A lower-case name that is no field is an error (``foo:bar``), so is a field in other
  capitals (``Title:``).

Every syntax error is :class:`QuerySyntaxError` (422 ``query_syntax``) with the position, the rule and a hint; the
text is never silently read another way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from search.core.errors import InvalidRequest

#: fields of the language: scoring fields (searched text), filters (restrict, do not score) and concepts (``term:``)
TEXT_FIELDS = ("title", "abstract")
FILTER_FIELDS = ("year", "section", "pmcid")
FIELDS = ("title", "abstract", "gene", "year", "section", "pmcid", "term")
OPERATORS = ("AND", "OR", "NOT")
#: groups may nest this deep (a 1,000-character query could otherwise recurse 500 levels)
MAX_DEPTH = 32
#: characters of the query quoted around an error's position
EXCERPT = 30

Syntax = Literal["query", "plain"]


class QuerySyntaxError(InvalidRequest):
    """A query the grammar does not accept: 422 ``query_syntax`` with ``position`` (0-based character offset), the
    ``rule`` that failed, a ``hint`` and a short ``excerpt`` around the position."""

    code = "query_syntax"

    def __init__(self, text: str, position: int, rule: str, message: str, hint: str):
        lo, hi = max(0, position - EXCERPT), min(len(text), position + EXCERPT)
        excerpt = ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")
        super().__init__(f"Query syntax: {message} at character {position + 1}. {hint}",
                         details={"field": "query", "position": position, "rule": rule, "hint": hint,
                                  "excerpt": excerpt})
        self.position = position


# ---- the syntax tree --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Word:
    """A bare word as written (``Su(H)``, ``wing,``): the planner cuts it into tokens and reads each."""

    text: str
    pos: int


@dataclass(frozen=True)
class Phrase:
    """``"…"`` (text without the quotes)."""

    text: str
    pos: int


@dataclass(frozen=True)
class Field:
    """``name:value``: ``title``/``abstract``/``gene`` restrict how ``value`` is searched; ``year``/``section``/
    ``pmcid`` are filters (``value`` then holds words only)."""

    name: str
    value: Node
    pos: int


@dataclass(frozen=True)
class Group:
    """Operands joined by one operator: ``or`` (juxtaposition or ``OR``) or ``and``. ``explicit`` is True for
    ``OR`` written out and for parentheses (a filter there is a boolean operand, not a restriction of the query)."""

    op: Literal["or", "and"]
    items: tuple[Node, ...]
    pos: int
    explicit: bool = False


@dataclass(frozen=True)
class Unary:
    """``-x``/``NOT x`` (``not``) or ``+x`` (``must``)."""

    op: Literal["not", "must"]
    item: Node
    pos: int


Node = Word | Phrase | Field | Group | Unary


@dataclass
class _Tok:
    kind: Literal["word", "phrase", "field", "lparen", "rparen", "and", "or", "not", "minus", "plus"]
    text: str
    pos: int


@dataclass
class Parsed:
    """The syntax tree and whether the text used any syntax at all (operators, fields, groups)."""

    tree: Node | None
    syntax: bool
    tokens: list[str] = field(default_factory=list)


def _term_start(ch: str) -> bool:
    return ch.isalnum() or ch in "\"("


def _lex(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    i, n, depth = 0, len(text), 0
    opened: list[int] = []
    value_next = False   # right after ``field:``: a value, never another field (term:go:0007219)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        at_value, value_next = value_next, False
        if ch == '"':
            end = text.find('"', i + 1)
            if end < 0:
                raise QuerySyntaxError(text, i, "unbalanced_quote", "this quote is never closed",
                                       'Close the phrase with a second " (or remove the quote).')
            out.append(_Tok("phrase", text[i + 1:end], i))
            i = end + 1
            continue
        if ch == "(":
            out.append(_Tok("lparen", "(", i))
            opened.append(i)
            depth += 1
            if depth > MAX_DEPTH:
                raise QuerySyntaxError(text, i, "too_deep", f"groups nest more than {MAX_DEPTH} levels",
                                       "Use fewer nested parentheses.")
            i += 1
            continue
        if ch == ")" and depth:
            out.append(_Tok("rparen", ")", i))
            opened.pop()
            depth -= 1
            i += 1
            continue
        if ch in "+-" and i + 1 < n and _term_start(text[i + 1]):
            out.append(_Tok("minus" if ch == "-" else "plus", ch, i))
            i += 1
            continue
        start = i
        head = None if at_value else _field_name(text, i)
        if head is not None:
            out.append(_Tok("field", head, i))
            i += len(head) + 1
            value_next = True
            continue
        # a word: to whitespace, a quote, or a ``)`` closing an open group (brackets inside the word stay in it)
        inner = 0
        while i < n:
            c = text[i]
            if c.isspace() or c == '"':
                break
            if c == "(":
                inner += 1
            elif c == ")":
                if inner:
                    inner -= 1
                elif depth:
                    break
            i += 1
        word = text[start:i]
        if word in OPERATORS:
            out.append(_Tok(word.lower(), word, start))   # type: ignore[arg-type]
        else:
            _check_word(text, word, start)
            out.append(_Tok("word", word, start))
    if opened:
        raise QuerySyntaxError(text, opened[-1], "unbalanced_parenthesis", "this parenthesis is never closed",
                               "Close the group with ) (or remove the parenthesis).")
    return out


def _field_name(text: str, i: int) -> str | None:
    """The field name at ``i`` when ``name:`` is glued to a value there; errors for unknown lower-case names and for
    field names in other capitals; None for anything else (text)."""
    j = i
    while j < len(text) and ("a" <= text[j].lower() <= "z"):
        j += 1
    if j == i or j >= len(text) or text[j] != ":":
        return None
    name = text[i:j]
    glued = j + 1 < len(text) and not text[j + 1].isspace()
    if name in FIELDS:
        if not glued:
            raise QuerySyntaxError(text, i, "empty_field", f"{name}: has no value",
                                   f"Write the value right after the colon: {name}:VALUE.")
        return name
    if not glued:
        return None                                    # prose: "genes: Dl and N"
    if name.lower() in FIELDS:
        raise QuerySyntaxError(text, i, "field_case", f"field {name}: is not written in lower case",
                               f"Write {name.lower()}:… (fields are lower case).")
    if name.islower():
        raise QuerySyntaxError(text, i, "unknown_field", f"unknown field {name}:",
                               f"Fields are {', '.join(f + ':' for f in FIELDS)}; to search the text "
                               f"{name}:… write it in quotes.")
    return None                                        # GO:0007219, Notch:Delta: text


#: PubMed's field tags (``BRCA2[ti]``) → what to write here instead
PUBMED_TAGS: dict[str, str] = {
    "ti": "title:WORD", "ab": "abstract:WORD", "tiab": "title:WORD OR abstract:WORD", "dp": "year:2005",
    "pdat": "year:2005", "gene": "gene:SYMBOL", "au": "nothing (authors are not indexed)",
    "1au": "nothing (authors are not indexed)", "mh": "the words (MeSH is not indexed)",
    "majr": "the words (MeSH is not indexed)", "pt": "nothing (publication types are not indexed)",
    "ta": "nothing (journals are not indexed)", "la": "nothing (languages are not indexed)",
    "tw": "the words", "all": "the words", "pmid": "pmcid:PMC… (papers are keyed by PMCID)",
}
_PUBMED_TAG = re.compile(r"\[([A-Za-z0-9]{2,5})\]$")


def _check_word(text: str, word: str, pos: int) -> None:
    """Search-box habits the language does not have, refused instead of being read as plain words."""
    tag = _PUBMED_TAG.search(word)
    if tag and tag.group(1).lower() in PUBMED_TAGS and tag.start() > 0:
        raise QuerySyntaxError(text, pos + tag.start(), "pubmed_tag", f"PubMed's field tag {tag.group(0)} is not "
                               "part of this language", f"Write {PUBMED_TAGS[tag.group(1).lower()]} instead.")
    if len(word) > 1 and word.endswith("*") and word[-2].isalnum():
        raise QuerySyntaxError(text, pos + len(word) - 1, "wildcard", "truncation (*) is not supported",
                               "Words are stemmed already (signal finds signals, signalling); write the word without "
                               "*.")
    if len(word) > 1 and word.rstrip("0123456789").endswith("~") and word[0].isalnum():
        raise QuerySyntaxError(text, pos + word.rindex("~"), "fuzzy", "fuzzy matching (~) is not supported",
                               "Write the word without ~ (term search, /v1/terms, reads misspellings).")


class _Parser:
    def __init__(self, text: str, toks: list[_Tok]):
        self.text, self.toks, self.i = text, toks, 0

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def error(self, pos: int, rule: str, message: str, hint: str) -> QuerySyntaxError:
        return QuerySyntaxError(self.text, pos, rule, message, hint)

    def parse(self) -> Node | None:
        if not self.toks:
            return None
        node = self.or_expr()
        tok = self.peek()
        if tok is not None:   # only a stray ``)`` can stop or_expr early, and the lexer leaves none
            raise self.error(tok.pos, "unexpected", f"unexpected {tok.text!r}", "Check the operators and groups.")
        return node

    def or_expr(self) -> Node:
        first = self.peek()
        pos = first.pos if first else len(self.text)
        items = [self.and_expr()]
        explicit = False
        while (tok := self.peek()) is not None and tok.kind != "rparen":
            if tok.kind == "or":
                self.take()
                explicit = True
                if self.peek() is None or self.peek().kind in ("rparen", "and", "or"):  # type: ignore[union-attr]
                    raise self.error(tok.pos, "dangling_operator", "OR has nothing on its right",
                                     "Put a word or group after OR, or write or in lower case to search for it.")
            items.append(self.and_expr())
        return items[0] if len(items) == 1 else Group("or", tuple(items), pos, explicit)

    def and_expr(self) -> Node:
        tok = self.peek()
        if tok is not None and tok.kind in ("and", "or"):
            raise self.error(tok.pos, "dangling_operator", f"{tok.text} has nothing on its left",
                             f"Put a word or group before {tok.text}, or write {tok.text.lower()} in lower case to "
                             "search for it.")
        pos = tok.pos if tok else len(self.text)
        items = [self.unary()]
        while (tok := self.peek()) is not None and tok.kind == "and":
            self.take()
            nxt = self.peek()
            if nxt is None or nxt.kind in ("rparen", "and", "or"):
                raise self.error(tok.pos, "dangling_operator", "AND has nothing on its right",
                                 "Put a word or group after AND, or write and in lower case to search for it.")
            items.append(self.unary())
        return items[0] if len(items) == 1 else Group("and", tuple(items), pos, True)

    def unary(self) -> Node:
        tok = self.peek()
        if tok is not None and tok.kind in ("not", "minus", "plus"):
            self.take()
            nxt = self.peek()
            if nxt is None or nxt.kind in ("rparen", "and", "or"):
                raise self.error(tok.pos, "dangling_operator", f"{tok.text} has nothing after it",
                                 f"Put a word or group after {tok.text}" + (
                                     ", or write not in lower case to search for it." if tok.kind == "not" else "."))
            return Unary("must" if tok.kind == "plus" else "not", self.unary(), tok.pos)
        return self.primary()

    def primary(self, in_field: str | None = None) -> Node:
        tok = self.take()
        if tok.kind == "lparen":
            if self.peek() is None or self.peek().kind == "rparen":  # type: ignore[union-attr]
                raise self.error(tok.pos, "empty_group", "this group is empty", "Put something between ( and ).")
            inner = self.or_expr()
            self.take()   # the ``)``: the lexer balanced every group
            if isinstance(inner, Group):
                return Group(inner.op, inner.items, tok.pos, True)
            return inner
        if tok.kind == "phrase":
            if not tok.text.strip():
                raise self.error(tok.pos, "empty_phrase", "this phrase is empty", "Put words between the quotes.")
            return Phrase(tok.text, tok.pos)
        if tok.kind == "field":
            if in_field is not None:
                raise self.error(tok.pos, "nested_field", f"field {tok.text}: inside {in_field}:",
                                 "Fields do not nest; write each field at the top level.")
            nxt = self.peek()
            if nxt is None or nxt.kind not in ("word", "phrase", "lparen"):
                raise self.error(tok.pos, "empty_field", f"{tok.text}: has no value",
                                 f'Follow {tok.text}: with a word, a "phrase" or a (group), glued to the colon.')
            value = self._field_value(tok.text)
            return Field(tok.text, value, tok.pos)
        if tok.kind == "word":
            return Word(tok.text, tok.pos)
        raise self.error(tok.pos, "unexpected", f"unexpected {tok.text!r}", "Check the operators and groups.")

    def _field_value(self, name: str) -> Node:
        """A field's value: a word, a phrase or a group, in which no other field may appear."""
        nxt = self.peek()
        assert nxt is not None
        if nxt.kind != "lparen":
            return self.primary(in_field=name)
        saved = self.i
        node = self.primary()
        if _has_field(node):
            pos = next(t.pos for t in self.toks[saved:self.i] if t.kind == "field")
            raise self.error(pos, "nested_field", f"a field inside {name}:(…)",
                             "Fields do not nest; write each field at the top level.")
        return node


def _has_field(node: Node) -> bool:
    if isinstance(node, Field):
        return True
    if isinstance(node, Group):
        return any(_has_field(x) for x in node.items)
    if isinstance(node, Unary):
        return _has_field(node.item)
    return False


def parse(text: str) -> Parsed:
    """The syntax tree of ``text`` (None for a query without words); :class:`QuerySyntaxError` when the grammar
    refuses it. ``syntax`` tells whether anything beyond words and phrases was written."""
    toks = _lex(text)
    tree = _Parser(text, toks).parse()
    used = any(t.kind not in ("word", "phrase") for t in toks)
    return Parsed(tree, used, [t.text for t in toks if t.kind == "word"])


def leaves(node: Node | None) -> list[Word | Phrase | Field]:
    """Words, phrases and fields in the order written (a field is one leaf with its value)."""
    if node is None:
        return []
    if isinstance(node, Group):
        return [leaf for x in node.items for leaf in leaves(x)]
    if isinstance(node, Unary):
        return leaves(node.item)
    return [node]
