"""JSON read as kdrill writes it: an object that names a key twice is refused.

Python's ``json`` keeps the last of two equal keys, other readers (and people) the first: a record
holding ``"verdict": "failed"`` and then ``"verdict": "passed"`` would read one way here and
another way there. kdrill never writes such an object, so one in the evidence was made by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class DuplicateKeyError(ValueError):
    """A JSON object names a key more than once; the message names the key."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object from its (key, value) pairs. Raises DuplicateKeyError on a repeated key."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKeyError(f"the key {key[:80]!r} appears twice in one object (readers disagree on "
                                    "which value counts; kdrill never writes that)")
        obj[key] = value
    return obj


def loads(text: str | bytes) -> Any:
    """``text`` parsed as JSON. Raises DuplicateKeyError, ValueError (not JSON), RecursionError."""
    return json.loads(text, object_pairs_hook=_unique_pairs)


def load_path(path: Path) -> Any:
    """``path`` (UTF-8) parsed as JSON; errors as :func:`loads`, plus OSError."""
    with Path(path).open("r", encoding="utf-8") as fh:
        return json.load(fh, object_pairs_hook=_unique_pairs)
