"""Render the HTML report in a real headless Chromium (Debian's ``chromium``).

Chromium only ever opens the report's own file:// URL: every host lookup is
mapped to NOTFOUND and the report's Content-Security-Policy forbids loads.
The screenshot is kept in ``build/browser-test/`` at the repo root (not in reports/, which holds runs).
"""

from __future__ import annotations

import shutil
import struct
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable

from harness.evidence.report import build_report

REPO_ROOT = Path(__file__).resolve().parents[2]
# Kept for a person to look at, outside reports/ (which holds only runs, sealed into one chain).
KEEP_DIR = REPO_ROOT / "build" / "browser-test"
WINDOW = (1400, 4000)

# Colours the chart draws with (sRGB): succeeded, failed, latency line.
GREEN, RED, BLUE = (22, 163, 74), (220, 38, 38), (37, 99, 235)


class RenderedDom(HTMLParser):
    """Collects drill sections and, per ``svg.timeline``, its drawn shapes."""

    SHAPES = {"rect", "circle", "path"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[dict[str, str]] = []
        self.charts: list[dict[str, object]] = []
        self.tags: list[str] = []
        self._in_svg = 0
        self._group: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        self.tags.append(tag)
        if tag == "section" and "drill" in classes:
            self.sections.append(a)
        if tag == "svg" and "timeline" in classes:
            self._in_svg += 1
            self.charts.append({"probe": a.get("data-probe"), "marks": 0, "latency": 0, "shapes": 0})
        elif self._in_svg:
            chart = self.charts[-1]
            if tag == "g":
                self._group.append(" ".join(classes))
            if tag in self.SHAPES:
                chart["shapes"] += 1
                group = self._group[-1] if self._group else ""
                if "marks" in group and tag == "rect":
                    chart["marks"] += 1
                if tag == "path" and "latency" in classes or "latency" in group:
                    chart["latency"] += 1

    def handle_endtag(self, tag: str) -> None:
        if not self._in_svg:
            return
        if tag == "g" and self._group:
            self._group.pop()
        if tag == "svg":
            self._in_svg -= 1


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def count_colours(path: Path, colours: dict[str, tuple[int, int, int]], enough: dict[str, int]) -> dict[str, int]:
    """Counts exact-colour pixels in an 8-bit RGB/RGBA PNG, top to bottom,
    stopping once every colour reached its ``enough`` count."""
    data = path.read_bytes()
    pos, idat = 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour_type in (2, 6) and interlace == 0, "unexpected PNG format"
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    raw = zlib.decompress(b"".join(idat))
    bpp = 3 if colour_type == 2 else 4
    stride = width * bpp
    wanted = {bytes(rgb): name for name, rgb in colours.items()}
    counts = dict.fromkeys(colours, 0)
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + (left + prev[i]) // 2) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for i in range(0, stride, bpp):
            name = wanted.get(bytes(line[i : i + 3]))
            if name:
                counts[name] += 1
        if all(counts[k] >= enough[k] for k in enough):
            break
        prev = line
    return counts


def test_report_renders_in_chromium(run_chromium: Callable, synthetic_run: Path, tmp_path: Path) -> None:
    report = build_report(synthetic_run)
    url = report.resolve().as_uri()
    assert url.startswith("file://")

    dumped = run_chromium("--dump-dom", url)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = RenderedDom()
    dom.feed(dumped.stdout)
    assert [(s["data-drill"], s["data-verdict"]) for s in dom.sections] == [
        ("node-kubelet-stop", "passed"),
        ("coredns-outage", "failed"),
    ]
    assert "table" in dom.tags and "blockquote" in dom.tags
    assert "script" not in dom.tags and "img" not in dom.tags
    probes = sorted(str(c["probe"]) for c in dom.charts)
    assert probes == sorted(["service-http", "dns-lookup", "idle-probe"] * 2)
    for chart in dom.charts:
        assert chart["shapes"] > 0, chart  # every chart draws at least its band and fault window
        if chart["probe"] != "idle-probe":
            assert chart["marks"] > 0 and chart["latency"] > 0, chart

    screenshot = tmp_path / "report-screenshot.png"
    shot = run_chromium(f"--screenshot={screenshot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", url)
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert screenshot.is_file(), shot.stderr[-2000:]
    KEEP_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(screenshot, KEEP_DIR / "report-screenshot.png")
    shutil.copyfile(report, KEEP_DIR / "report.html")

    assert screenshot.stat().st_size > 10 * 1024
    assert png_size(screenshot) == WINDOW
    # The charts were painted: success, failure and latency colours are on screen.
    enough = {"green": 500, "red": 500, "blue": 50}
    counts = count_colours(screenshot, {"green": GREEN, "red": RED, "blue": BLUE}, enough)
    assert all(counts[k] >= enough[k] for k in enough), counts
