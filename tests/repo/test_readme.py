"""The documentation's copies of example files equal the files, so README.md and docs/ cannot drift from
what CI runs.

A copy is a fenced block right after the line ``<!-- copy of PATH; ... -->``, in README.md or a docs/*.md.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).parents[2]  # the checkout, or its runfiles tree under Bazel
CONSUMER_PREFIX = "examples/consumer/"
# Under Bazel the consumer workspace's files come through the repository @sparse_mla_example_consumer.
CONSUMER_REPOSITORY = ROOT.parent / "sparse_mla_example_consumer"

COPIED = [
    "examples/decode_step.py",
    "examples/consumer/WORKSPACE",
    "examples/consumer/BUILD.bazel",
    "examples/consumer/.bazelrc",
]
"""Every file the README copies: a copy removed from the README fails as well as a changed one."""

_COPY = re.compile(r"^<!-- copy of (\S+); [^\n]*-->\n```[a-z]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _source(path: str) -> pathlib.Path:
    if path.startswith(CONSUMER_PREFIX) and CONSUMER_REPOSITORY.is_dir():
        return CONSUMER_REPOSITORY / path[len(CONSUMER_PREFIX):]
    return ROOT / path


def _documents() -> list:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def _copies() -> dict:
    copies = [pair for document in _documents() for pair in _COPY.findall(document.read_text())]
    assert len({path for path, _ in copies}) == len(copies), "a file is copied twice in the documentation"
    return dict(copies)


def test_readme_copies_exactly_the_listed_files():
    assert sorted(_copies()) == sorted(COPIED)


@pytest.mark.parametrize("path", COPIED)
def test_copy_equals_the_file(path):
    copy = _copies().get(path)
    assert copy is not None, f"neither README.md nor docs/ has a copy of {path}"
    assert copy == _source(path).read_text(), (
        f"the documentation's copy of {path} differs from the file; paste the file into it again"
    )
