"""Runs pytest on the files given as arguments, for Bazel tests (tools/testing/python.bzl).

Writes the JUnit XML where Bazel asks (XML_OUTPUT_FILE), so test counts reach bazel-testlogs, runs its
shard of the tests where Bazel shards the target (``shard_count``), and on a machine without a CUDA
device turns on Triton's interpreter so the Triton kernels run on the CPU (the launcher of python.bzl
keeps Triton's cache inside the test's temporary directory).
"""

import os
import pathlib
import sys


class BazelShard:
    """Keeps shard TEST_SHARD_INDEX of TEST_TOTAL_SHARDS of the collected tests (Bazel's test sharding).

    Each shard takes a contiguous run of the tests in collection order: neighbouring parametrizations
    share Triton specializations, so a shard compiles fewer kernels than an interleaved cut would.
    """

    def __init__(self, index: int, total: int):
        if not 0 <= index < total:
            raise ValueError(f"TEST_SHARD_INDEX={index} is not in [0, TEST_TOTAL_SHARDS={total})")
        self.index, self.total = index, total
        self.collected = 0  # the file's tests, before the cut

    def pytest_collection_modifyitems(self, config, items):
        self.collected = len(items)
        begin, end = len(items) * self.index // self.total, len(items) * (self.index + 1) // self.total
        deselected = items[:begin] + items[end:]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        items[:] = items[begin:end]


def main() -> int:
    import torch  # deferred: only a test run needs it

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import pytest  # noqa: E402

    args = ["-q", "-p", "no:cacheprovider", "-rs"]
    if "XML_OUTPUT_FILE" in os.environ:
        args.append("--junitxml=" + os.environ["XML_OUTPUT_FILE"])
    shard = None
    if "TEST_TOTAL_SHARDS" in os.environ:
        shard = BazelShard(int(os.environ["TEST_SHARD_INDEX"]), int(os.environ["TEST_TOTAL_SHARDS"]))
        if "TEST_SHARD_STATUS_FILE" in os.environ:  # tells Bazel this runner shards
            pathlib.Path(os.environ["TEST_SHARD_STATUS_FILE"]).touch()
    rc = pytest.main(args + sys.argv[1:], plugins=[shard] if shard else [])
    # A shard left with no test of a file that has some (more shards than tests) has nothing to fail; a
    # file without tests fails in every shard, as it does unsharded.
    empty_shard = shard is not None and shard.collected > 0 and rc == pytest.ExitCode.NO_TESTS_COLLECTED
    return 0 if empty_shard else rc


if __name__ == "__main__":
    sys.exit(main())
