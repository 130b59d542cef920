"""A run directory's layout: the run id that names it and the names of the seal's files in it.

The lowest module of the evidence layer: records (the writer) and the manifest (the seal) both
read these names, so neither has to import the other.
"""

from __future__ import annotations

import re

MANIFEST_NAME = "manifest.json"
SIGNATURE_NAME = "manifest.sig"
#: The seal's own files, at the top of the run directory: not listed in the manifest.
SEAL_FILES = frozenset({MANIFEST_NAME, SIGNATURE_NAME})

# The failure matrix of the run (harness/evidence/failure_matrix.py), beside the records: "_" is in
# no scenario's name, so no drill record is ever named so.
MATRIX_CSV_NAME = "failure_matrix.csv"
MATRIX_JSON_NAME = "failure_matrix.json"

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class RunIdError(ValueError):
    """A run id is malformed, or already names a run; the message is one line."""


def validate_run_id(run_id: object) -> str:
    """Returns ``run_id`` when it is safe as one directory name under the reports root.

    Valid: 1 to 100 characters from ``A-Z a-z 0-9 . _ -``, starting with a letter or digit,
    without ``..`` (so no path separators, no ``.``/``..``, nothing hidden). Raises RunIdError
    with a one-line message otherwise.
    """
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise RunIdError(f"invalid run id {run_id!r}: use 1 to 100 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit, without '..'")
    return run_id


def is_run_id(name: str) -> bool:
    """Whether ``name`` is a valid run id (see :func:`validate_run_id`)."""
    try:
        validate_run_id(name)
    except RunIdError:
        return False
    return True
