"""Text from outside kdrill (a scenario's keys, a path, an argument, a record) made safe to print
on a terminal."""

from __future__ import annotations


def escaped(text: str, keep_newlines: bool = False) -> str:
    """``text`` with every character that is not printable (ESC, BEL, a right-to-left override; a
    newline unless ``keep_newlines``) written as its Python escape (``\\x1b``): a control sequence
    in a key, a path or a record must not rewrite what the terminal shows."""
    return "".join(c if c.isprintable() or (keep_newlines and c == "\n") else repr(c)[1:-1] for c in text)
