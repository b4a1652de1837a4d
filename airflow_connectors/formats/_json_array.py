"""Splits the bytes of JSON arrays (``array: true``) into their elements as they arrive.

The scanner looks only at what separates elements: brackets and braces outside strings,
strings (so a ``]`` or ``"`` inside one is not structure), commas and blanks between
elements. It does not parse element contents; the JSON format decodes each element as a
record. So an object is read a block at a time, and memory stays bounded by the block
plus the largest element, however large the array.

A flat object element (``{"a": 1, "b": "x"}``, the common case) is measured with a few
byte searches; nested or escaped elements are walked token by token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Where the scan stands: outside any array (before ``[`` or between arrays), right
#: after ``[``, after an element, after a ``,``, or at a resumed offset (after an
#: element or a ``,`` of an open array, or after a closed array).
OUT, FIRST, NEXT, ELEM, RESUME = range(5)

_BLANK = re.compile(rb"[ \t\r\n]*")
# A whole string, or an unterminated one (a lone quote: the string goes on past the
# bytes at hand), or a bracket or brace.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{}]', re.DOTALL)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR_END = re.compile(rb"[,\]\s]")
_OPEN = frozenset(b"{[")
_LBRACE, _LBRACKET, _RBRACKET, _COMMA, _QUOTE = b'{[],"'
_INCOMPLETE = -1


@dataclass
class Scan:
    """What one pass over a buffer found."""

    #: Byte spans of the complete elements, in order.
    spans: list[tuple[int, int]] = field(default_factory=list)
    #: Bytes scanned to a point where the state is known (the next pass starts there).
    used: int = 0
    state: int = OUT
    #: A syntax error between elements: where it is and what was expected.
    error: tuple[int, str] | None = None


def scan(buf: bytes, state: int, *, at_end: bool) -> Scan:
    """The elements of ``buf`` from scan state ``state``. ``at_end``: no bytes follow
    ``buf`` in the object (an element or array still open there is an error)."""
    out = Scan(state=state)
    pos, n = 0, len(buf)
    while True:
        pos = _BLANK.match(buf, pos).end()  # type: ignore[union-attr]
        out.used = pos
        if pos >= n:
            if at_end and out.state != OUT:
                out.error = (pos, "the object ends before the array's closing ']'")
            return out
        step = _structure(buf[pos], out.state)
        if isinstance(step, str):
            out.error = (pos, step)
            return out
        if step is not None:
            out.state, pos = step, pos + 1
            continue
        end = _element(buf, pos, at_end)
        if isinstance(end, str):
            out.error = (pos, end)
            return out
        if end == _INCOMPLETE:
            return out  # the element goes on in bytes still to come
        out.spans.append((pos, end))
        out.state, pos = NEXT, end


def _structure(c: int, state: int) -> int | str | None:
    """The state after byte ``c`` (not a blank) in ``state``: None when an element
    starts there, a message when ``c`` cannot stand there."""
    if state == RESUME and c == _LBRACKET:
        state = OUT  # a new array after one that was closed
    if state == OUT:
        if c == _LBRACKET:
            return FIRST
        return f"expected a JSON array of records (format config array: true), got {_kind(c)}"
    if c == _RBRACKET and state != ELEM:
        return OUT
    if c == _COMMA and state in (NEXT, RESUME):
        return ELEM
    if state == NEXT:
        return f"expected ',' or ']' after an array element, got {_kind(c)}"
    if c in b",]}":
        return f"expected an array element, got {_kind(c)}"
    return None


def _element(buf: bytes, pos: int, at_end: bool) -> int | str:
    """Where the element at ``pos`` ends (-1: past ``buf``), or a message when the
    object ends inside it."""
    end = element_end(buf, pos)
    if end == _INCOMPLETE and at_end:
        if buf[pos] in _OPEN or buf[pos] == _QUOTE:
            return "the object ends inside an array element"
        return len(buf)  # a scalar running to the end
    return end


def element_end(buf: bytes, pos: int) -> int:
    """Where the element starting at ``pos`` ends, or -1 when it goes on past ``buf``."""
    c = buf[pos]
    if c == _LBRACE:
        close = buf.find(b"}", pos)
        if (
            close >= 0
            and buf.find(b"\\", pos, close) < 0
            and buf.count(b'"', pos, close) % 2 == 0
            and buf.find(b"{", pos + 1, close) < 0
            and buf.find(b"[", pos, close) < 0
        ):
            # No escapes and an even number of quotes: the brace is outside strings;
            # nothing nested: it closes this object.
            return close + 1
        return _nested_end(buf, pos)
    if c == _LBRACKET:
        return _nested_end(buf, pos)
    if c == _QUOTE:
        m = _STRING.match(buf, pos)
        return m.end() if m else _INCOMPLETE
    m = _SCALAR_END.search(buf, pos)
    return m.start() if m else _INCOMPLETE


def _nested_end(buf: bytes, pos: int) -> int:
    depth = 0
    for m in _TOKEN.finditer(buf, pos):
        start = m.start()
        c = buf[start]
        if c == _QUOTE:
            if m.end() - start == 1:
                return _INCOMPLETE  # an unterminated string
            continue
        depth += 1 if c in _OPEN else -1
        if depth == 0:
            return m.end()
    return _INCOMPLETE


def _kind(c: int) -> str:
    if c == _LBRACE:
        return "an object"
    if c == _QUOTE:
        return "a string"
    if chr(c).isprintable() and c < 128:
        return f"'{chr(c)}'"
    return f"the byte 0x{c:02x}"
