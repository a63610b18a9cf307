"""One closing line for `make test`'s several pytest runs (tools/test_suite.sh): their JUnit XML files added up.

    python tools/suite_summary.py build/test-logs/*.xml
    suite: 859 passed, 0 failed, 1 skipped (unit 542, ray 18, processes 58, main 207, beside 26, installed 9)

A run that wrote no file (it crashed before the end) is named as one that did not finish and counts as a failure.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def counts(report: Path) -> dict[str, int]:
    """tests, failures (failed + errors) and skipped of one JUnit XML file."""
    root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {"tests": 0, "failed": 0, "skipped": 0}
    for suite in suites:
        total["tests"] += int(suite.get("tests", 0))
        total["failed"] += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        total["skipped"] += int(suite.get("skipped", 0))
    return total


def summary(reports: list[Path]) -> tuple[str, bool]:
    """The closing line and whether every run passed; each run is named by its file's stem."""
    passed = failed = skipped = 0
    parts = []
    for report in reports:
        if not report.exists():
            parts.append(f"{report.stem} did not finish")
            failed += 1
            continue
        c = counts(report)
        passed += c["tests"] - c["failed"] - c["skipped"]
        failed += c["failed"]
        skipped += c["skipped"]
        parts.append(f"{report.stem} {c['tests']}")
    return f"suite: {passed} passed, {failed} failed, {skipped} skipped ({', '.join(parts)})", failed == 0


def main(paths: list[str]) -> int:
    line, ok = summary([Path(path) for path in paths])
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
