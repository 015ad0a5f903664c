"""A small lexer for the C++ expressions of a spec (`expr`, `pair`).

It does not parse C++; it finds what a single expression cannot contain (statements, comments,
preprocessor lines, unbalanced brackets) and the function calls in it, skipping string and
character literals. The spec is trusted C++: these checks catch mistakes, they are not a sandbox.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_LITERAL = re.compile(r"(?:u8|[uUL])?(R?)([\"'])")
_IDENT = re.compile(r"[A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_\u0080-\U0010ffff]*")
_NUMBER = re.compile(r"\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*")
_RAW_DELIM = re.compile(r"[^\s()\\]{0,16}\(")
_OPEN, _CLOSE = "([", ")]"
_FORBIDDEN = {
    ";": "';' (one expression, not statements)",
    "{": "'{' (braces would open a block)",
    "}": "'}' (braces would close a block)",
    "#": "'#' (preprocessor)",
    "\\": "a backslash outside a string or character literal",
}
_FORBIDDEN_PAIRS = {
    "//": "a '//' comment", "/*": "a '/*' comment", "*/": "'*/'",
    "<%": "the digraph '<%' ({)", "%>": "the digraph '%>' (})", "%:": "the digraph '%:' (#)",
    ":>": "the digraph ':>' (])",
}


@dataclass(frozen=True)
class Token:
    kind: str       # "ident", "number", "literal", "punct"
    text: str
    pos: int        # offset in the expression
    glued: bool     # no whitespace between this token and the previous one


class ExprError(ValueError):
    pass


def tokens(text: str) -> list[Token]:
    """The expression's tokens; ExprError names the first thing that cannot be in one expression."""
    out: list[Token] = []
    i, n = 0, len(text)
    glued = False
    while i < n:
        c = text[i]
        if c in " \t":
            i += 1
            glued = False
            continue
        if c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F:
            raise ExprError(f"a line break or control character at offset {i}")
        start = i
        m = _LITERAL.match(text, i)
        if m:
            i = _skip_literal(text, m)
            out.append(Token("literal", text[start:i], start, glued))
        elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            i = _NUMBER.match(text, i).end()
            out.append(Token("number", text[start:i], start, glued))
        elif _IDENT.match(text, i):
            i = _IDENT.match(text, i).end()
            word = text[start:i]
            if word in ("_Pragma", "__pragma"):
                raise ExprError(f"the preprocessor operator {word} at offset {start}")
            out.append(Token("ident", word, start, glued))
        else:
            two = text[i:i + 2]
            if two in _FORBIDDEN_PAIRS:
                raise ExprError(f"{_FORBIDDEN_PAIRS[two]} at offset {i}")
            if two == "<:" and text[i + 2:i + 3] != ":":
                raise ExprError(f"the digraph '<:' ([) at offset {i}")
            if two == "??" and text[i + 2:i + 3] in "=/'()!<>-" and i + 2 < n:
                raise ExprError(f"the trigraph {text[i:i + 3]!r} at offset {i}")
            if c in _FORBIDDEN:
                raise ExprError(f"{_FORBIDDEN[c]} at offset {i}")
            out.append(Token("punct", c, start, glued))
            i += 1
        glued = True
    return out


def _skip_literal(text: str, m: re.Match) -> int:
    raw, quote = m.group(1), m.group(2)
    i = m.end()
    if raw and quote == '"':
        d = _RAW_DELIM.match(text, i)
        if not d:
            raise ExprError(f"a raw string literal without a valid delimiter at offset {m.start()}")
        end = text.find(")" + d.group()[:-1] + '"', d.end())
        if end < 0:
            raise ExprError(f"an unterminated raw string literal at offset {m.start()}")
        return end + len(d.group()) + 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == quote:
            return i + 1
        i += 1
    what = "string" if quote == '"' else "character"
    raise ExprError(f"an unterminated {what} literal at offset {m.start()}")


def check(text: str) -> list[Token]:
    """Tokens of `text` if it can be one expression: no ';', braces, '#', comments, line breaks,
    and balanced () and [] (outside literals). Raises ExprError otherwise."""
    toks = tokens(text)
    stack: list[Token] = []
    for t in toks:
        if t.kind != "punct":
            continue
        if t.text in _OPEN:
            stack.append(t)
        elif t.text in _CLOSE:
            want = _OPEN[_CLOSE.index(t.text)]
            if not stack:
                raise ExprError(f"an unmatched {t.text!r} at offset {t.pos}")
            if stack[-1].text != want:
                raise ExprError(f"{t.text!r} at offset {t.pos} closes {stack[-1].text!r} of offset {stack[-1].pos}")
            stack.pop()
    if stack:
        raise ExprError(f"an unclosed {stack[-1].text!r} at offset {stack[-1].pos}")
    if not toks:
        raise ExprError("no expression")
    return toks


def _match(toks: list[Token], i: int) -> int:
    """Index of the bracket closing the one at toks[i] (the input is balanced)."""
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j]
        if t.kind == "punct" and t.text in _OPEN:
            depth += 1
        elif t.kind == "punct" and t.text in _CLOSE:
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def _arg_counts(toks: list[Token], lo: int, hi: int) -> set[int]:
    """How many arguments the call whose parentheses are toks[lo] and toks[hi] passes. Commas of a
    template argument list (f<a, b>(x)) are not argument separators, but a '<' may as well be a
    comparison: both readings are returned."""
    if hi == lo + 1:
        return {0}
    counts = set()
    for templates in (False, True):
        depth, angle, commas = 0, 0, 0
        for j in range(lo + 1, hi):
            t = toks[j]
            if t.kind != "punct":
                continue
            if t.text in _OPEN:
                depth += 1
            elif t.text in _CLOSE:
                depth -= 1
            elif templates and depth == 0 and t.text == "<" and t.glued and toks[j - 1].kind == "ident":
                angle += 1
            elif templates and depth == 0 and t.text == ">" and angle:
                angle -= 1
            elif t.text == "," and depth == 0 and not angle:
                commas += 1
        counts.add(commas + 1)
    return counts


@dataclass(frozen=True)
class Call:
    name: str              # as written, namespaces included (ew::sigmoid); a leading :: dropped
    plain: bool            # an unqualified name called directly: name(...), which may be an op
    nargs: frozenset       # possible argument counts (see _arg_counts)
    pos: int


def calls(toks: list[Token]) -> list[Call]:
    """Every call in a checked expression: a name, maybe qualified and with template arguments,
    followed by '('."""
    out = []
    for i, t in enumerate(toks):
        if t.kind != "punct" or t.text != "(" or i == 0:
            continue
        j = i - 1
        templated = False
        if toks[j].kind == "punct" and toks[j].text == ">":
            depth = 0
            while j >= 0:
                if toks[j].kind == "punct" and toks[j].text == ">":
                    depth += 1
                elif toks[j].kind == "punct" and toks[j].text == "<":
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            j -= 1
            templated = True
            if j < 0 or toks[j].kind != "ident":
                continue
        if toks[j].kind != "ident":
            continue
        parts = [toks[j].text]
        k = j - 1
        qualified = False
        while k >= 1 and toks[k].text == ":" and toks[k - 1].text == ":":
            qualified = True
            if k >= 2 and toks[k - 2].kind == "ident":
                parts.insert(0, toks[k - 2].text)
                k -= 3
            else:
                k -= 2
                break
        member = k >= 0 and (toks[k].text == "." or (toks[k].text == ">" and k >= 1 and toks[k - 1].text == "-"))
        if member:
            continue
        close = _match(toks, i)
        out.append(Call("::".join(parts), not qualified and not templated, frozenset(_arg_counts(toks, i, close)),
                        toks[j].pos))
    return out
