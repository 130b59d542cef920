"""docs/reference.md is what ``kdrill schema --markdown`` prints from the installed kinds' own
declarations (harness/cli/reference.py): a parameter, field or measure changed in the code and
not in the page fails here."""

from __future__ import annotations

from pathlib import Path

from harness.cli import main
from harness.cli.reference import reference_markdown
from harness.engine.measures import measure_kinds
from harness.faults import fault_kinds
from harness.probes import probe_types

PAGE = Path(__file__).resolve().parents[3] / "docs" / "reference.md"


def test_the_committed_page_is_the_generated_one():
    assert PAGE.read_text() == reference_markdown(), "regenerate: kdrill schema --markdown > docs/reference.md"


def test_every_installed_kind_has_its_entry(capsys):
    assert main(["schema", "--markdown"]) == 0
    page = capsys.readouterr().out
    for kind in [*fault_kinds(), *probe_types()]:
        assert f"### `{kind}`" in page, kind
    for kind in measure_kinds():
        assert f"| `{kind}` | " in page, kind
    assert "| `hold_seconds` | seconds | 10 to 600 | yes |" in page  # a param's unit and range, from its Param
