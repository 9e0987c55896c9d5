"""Sums the JUnit XML files under one or more bazel-testlogs folders (pytest's, or Bazel's own for
tests that write none) and prints one closing line: 'sparse_mla: N passed, N failed, N skipped'.
Exits 1 when no test ran at all."""

import pathlib
import sys
import xml.etree.ElementTree as ElementTree


def main(testlogs_folders: list) -> int:
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    paths = [path for folder in testlogs_folders for path in sorted(pathlib.Path(folder).glob("**/test.xml"))]
    for path in paths:
        root = ElementTree.parse(path).getroot()
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        for suite in suites:
            for key in totals:
                totals[key] += int(suite.get(key, 0))
    failed = totals["failures"] + totals["errors"]
    passed = totals["tests"] - failed - totals["skipped"]
    print(f"sparse_mla: {passed} passed, {failed} failed, {totals['skipped']} skipped")
    return 0 if totals["tests"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["bazel-testlogs"]))
