"""Where kdrill's own files are: the built-in scenarios, drills and cluster configs.

In the source checkout they are at the top of the tree, beside ``harness/``::

    scenarios/*.yaml   the built-in scenarios
    drills/*.py        the drills (pytest files) the scenarios name as ``drill: drills/<file>``
    clusters/          the kind configs, encryption-at-rest.yaml.j2 and images/ (the offline image build)

The wheel carries the same three directories inside the package, as ``harness/_data/scenarios``,
``harness/_data/drills`` and ``harness/_data/clusters`` (pyproject.toml maps them there when the
wheel is built; nothing is copied in the checkout). Every module that needs one of these files
asks this one, so kdrill behaves the same from a checkout (``pip install -e .``, or the checkout
on ``PYTHONPATH``) and from an installed wheel, whatever the working directory.

The files are looked up from this module's location on disk rather than through
``importlib.resources``: pytest runs the drills from real files, kind and Docker read real paths,
and a wheel is always installed unpacked, so a real directory is what is needed either way.
"""

from __future__ import annotations

import functools
from pathlib import Path

# The package directory, harness/ (this module is harness/core/resources.py).
PACKAGE_DIR = Path(__file__).resolve().parent.parent
# Where an installed wheel has the data (see [tool.setuptools] in pyproject.toml).
INSTALLED_DATA_DIR = PACKAGE_DIR / "_data"
# The checkout's top directory, when the harness runs from one.
CHECKOUT_DIR = PACKAGE_DIR.parent
DATA_NAMES = ("scenarios", "drills", "clusters")


class ResourcesMissing(FileNotFoundError):
    """Neither the installed package nor a checkout holds kdrill's built-in files: a broken
    installation (e.g. a wheel built without them)."""


def _holds_data(root: Path) -> bool:
    return all((root / name).is_dir() for name in DATA_NAMES)


@functools.cache
def data_root() -> Path:
    """The directory holding ``scenarios/``, ``drills/`` and ``clusters/``: ``harness/_data``
    in an installed wheel, otherwise the checkout the harness runs from (a checkout never has
    ``harness/_data``). Paths inside it are the ones scenarios use, e.g. ``drills/test_x.py``.
    Raises ResourcesMissing when neither holds them."""
    for root in (INSTALLED_DATA_DIR, CHECKOUT_DIR):
        if _holds_data(root):
            return root
    raise ResourcesMissing(
        f"kdrill's built-in {', '.join(n + '/' for n in DATA_NAMES)} are neither in the installed package "
        f"({INSTALLED_DATA_DIR}) nor in a checkout ({CHECKOUT_DIR}); reinstall kdrill")


def checkout() -> Path | None:
    """The source checkout kdrill runs from (its top directory: pyproject.toml, harness/,
    scenarios/, ...), or None when it runs from an installed wheel."""
    root = data_root()
    return None if root == INSTALLED_DATA_DIR else root


def scenarios_dir() -> Path:
    """The built-in scenarios (``scenarios/``)."""
    return data_root() / "scenarios"


def drills_dir() -> Path:
    """The drills (``drills/``): every scenario's ``drill`` file is found here, a team's own
    scenarios (``--scenarios-dir``) included."""
    return data_root() / "drills"


def drill_file(relative: str) -> Path:
    """The file a scenario's ``drill`` field names (``drills/test_x.py``); not checked to exist."""
    return data_root() / relative


def clusters_dir() -> Path:
    """The kind cluster configs (``clusters/<name>.yaml``), the encryption-at-rest template and
    ``images/``, the inputs of the offline image build."""
    return data_root() / "clusters"


def default_reports_dir() -> Path:
    """Where runs go unless ``--reports``/``$KDRILL_REPORTS`` say otherwise: the checkout's
    ``reports/``, or ``reports/`` in the current directory for an installed kdrill (never inside
    the installed package). Absolute, as the drills' pytest runs in another directory."""
    root = checkout()
    return root / "reports" if root is not None else Path("reports").absolute()
