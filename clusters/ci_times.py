#!/usr/bin/env python3
"""The tests' time by part of the presubmit tier, from pytest's JUnit XML: one ``ci-times:`` line
each for the unit tests, the browser tests, the cluster tests and the drills (seconds, tests).

  python3 clusters/ci_times.py JUNIT.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

PARTS = (("tests/unit", "unit"), ("tests/browser", "browser"), ("tests/cluster", "cluster tests"), ("drills", "drills"))


def part_of(classname: str) -> str:
    path = classname.replace(".", "/")
    return next((name for prefix, name in PARTS if path.startswith(prefix)), "other")


def main(path: str) -> int:
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for case in ET.parse(path).iter("testcase"):
        part = part_of(case.get("classname", ""))
        seconds[part] += float(case.get("time") or 0)
        counts[part] += 1
    for _, name in (*PARTS, ("", "other")):
        if counts[name]:
            print(f"ci-times: {name}: {seconds[name]:.0f} s in {counts[name]} test(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
