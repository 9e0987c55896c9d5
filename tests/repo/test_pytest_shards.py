"""tools/testing/pytest_main.py under Bazel's test sharding: the shards of a file partition its tests.

Each case runs the runner in a subprocess, as Bazel does (TEST_TOTAL_SHARDS, TEST_SHARD_INDEX,
TEST_SHARD_STATUS_FILE, XML_OUTPUT_FILE), on a generated file of NUM_TESTS tests, and reads which tests
ran from the JUnit XML it wrote.
"""

import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

ROOT = pathlib.Path(__file__).parents[2]  # the checkout, or its runfiles tree under Bazel
RUNNER = ROOT / "tools" / "testing" / "pytest_main.py"
NUM_TESTS = 3
TESTS = f"""
import pytest

@pytest.mark.parametrize("i", range({NUM_TESTS}))
def test_case(i):
    assert i >= 0
"""


def _run_shards(tmp_path, indices, total, tests=TESTS):
    """(exit code, names of the tests run, whether the status file exists, output) of each shard of a file
    holding ``tests``, run at once."""
    source = tmp_path / "test_generated.py"
    source.write_text(tests)
    runs = []
    for index in indices:
        xml, status = tmp_path / f"shard{index}.xml", tmp_path / f"shard{index}.status"
        env = dict(os.environ, TEST_TOTAL_SHARDS=str(total), TEST_SHARD_INDEX=str(index),
                   TEST_SHARD_STATUS_FILE=str(status), XML_OUTPUT_FILE=str(xml))
        process = subprocess.Popen([sys.executable, str(RUNNER), str(source)], cwd=tmp_path, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        runs.append((process, xml, status))
    results = []
    for process, xml, status in runs:
        output = process.communicate()[0]
        names = [case.get("name") for case in ElementTree.parse(xml).getroot().iter("testcase")] if xml.exists() else []
        results.append((process.returncode, names, status.exists(), output))
    return results


@pytest.mark.parametrize("total", [2, NUM_TESTS + 1])
def test_shards_partition_the_tests(tmp_path, total):
    ran = []
    for index, (rc, names, status_written, output) in enumerate(_run_shards(tmp_path, range(total), total)):
        assert rc == 0, output
        assert status_written, f"shard {index} of {total}: TEST_SHARD_STATUS_FILE not written"
        assert len(names) in (NUM_TESTS // total, -(-NUM_TESTS // total)), f"shard {index} of {total}: {names}"
        ran += names
    assert sorted(ran) == sorted(f"test_case[{i}]" for i in range(NUM_TESTS))


def test_a_shard_index_out_of_range_is_refused(tmp_path):
    [(rc, names, _, output)] = _run_shards(tmp_path, [3], 3)
    assert rc != 0 and not names
    assert "TEST_SHARD_INDEX=3 is not in [0, TEST_TOTAL_SHARDS=3)" in output


def test_a_file_without_tests_fails_in_every_shard(tmp_path):
    [(rc, names, _, output)] = _run_shards(tmp_path, [0], 2, tests="")
    assert rc != 0 and not names, output
