"""Runs pytest on the files given as arguments, for Bazel tests (tools/testing/python.bzl).

Writes the JUnit XML where Bazel asks (XML_OUTPUT_FILE), so test counts reach bazel-testlogs, and on
a machine without a CUDA device turns on Triton's interpreter so the Triton kernels run on the CPU
(the launcher of python.bzl keeps Triton's cache inside the test's temporary directory).
"""

import os
import sys


def main() -> int:
    import torch  # deferred: only a test run needs it

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import pytest  # noqa: E402

    args = ["-q", "-p", "no:cacheprovider", "-rs"]
    if "XML_OUTPUT_FILE" in os.environ:
        args.append("--junitxml=" + os.environ["XML_OUTPUT_FILE"])
    return pytest.main(args + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
