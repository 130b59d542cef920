"""The reference in docs/ builds as a site with no warning (MkDocs, strict: a link to a page or
anchor that does not exist fails it), and every relative link of the README reaches a file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_docs_build_with_no_warning(tmp_path: Path) -> None:
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()


def test_every_relative_link_in_the_readme_reaches_a_file_and_its_heading() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    broken = []
    for target in LINK.findall(readme):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        page = REPO_ROOT / path if path else REPO_ROOT / "README.md"
        if not page.is_file():
            broken.append(target)
        elif anchor and anchor not in {_slug(h) for h in re.findall(r"^#+ (.+)$", page.read_text(), re.M)}:
            broken.append(target)
    assert broken == []


def test_the_readme_first_screen_says_what_to_type() -> None:
    """The quick start comes first: what kdrill is, then the commands, within a screen of text."""
    lines = (REPO_ROOT / "README.md").read_text().splitlines()
    start = lines.index("## Quick start")
    assert start < 15 and "kdrill doctor" in "\n".join(lines[start:start + 12])
    assert max(len(line) for line in lines) <= 130


def _slug(heading: str) -> str:
    """GitHub's and MkDocs' anchor of a heading: lowercase, punctuation dropped, spaces to '-'."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))
