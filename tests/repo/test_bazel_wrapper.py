"""tools/bazel: which Bazel it runs and the command line that reaches it, online and offline.

Each test copies the wrapper and the scripts it calls into a fresh tree and points it at a stand-in
Bazel that prints its arguments and PYTHON_BIN_PATH, so nothing here starts a real Bazel.
"""

import os
import pathlib
import shutil
import stat
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]  # the checkout, or its runfiles tree under Bazel
WRAPPER_FILES = [".bazelversion", "tools/bazel", "tools/npm_bazel.sh", "tools/python_env.sh",
                 "tools/ci/requirements.txt", "tools/offline/write_bazelrc.sh"]

STAND_IN_BAZEL = """#!/usr/bin/env bash
echo "bazel=$0"
echo "python=${PYTHON_BIN_PATH:-}"
for arg in "$@"; do echo "arg=$arg"; done
"""


def _executable(path: pathlib.Path, text: str) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def checkout(tmp_path):
    """A tree holding the wrapper and what it calls, as in a checkout."""
    for name in WRAPPER_FILES:
        target = tmp_path / "checkout" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, target)
    return tmp_path / "checkout"


def _run(checkout, args, offline, extra_env=None, bazel_real=True):
    """Runs tools/bazel with the stand-in; returns (bazel path, PYTHON_BIN_PATH, arguments)."""
    stand_in = _executable(checkout.parent / "real" / "bazel", STAND_IN_BAZEL)
    env = {
        "PATH": os.environ.get("PATH", "/bin:/usr/bin"),
        "HOME": str(checkout.parent),
        "SPARSE_MLA_OFFLINE": offline,
        "PYTHON_BIN_PATH": sys.executable,
        "SPARSE_MLA_TRUSTSTORE": "",
    }
    if bazel_real:
        env["BAZEL_REAL"] = str(stand_in)
    env.update(extra_env or {})
    result = subprocess.run(
        [str(checkout / "tools" / "bazel"), *args], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"tools/bazel {args} exited {result.returncode}: {result.stderr}"
    lines = result.stdout.splitlines()
    return lines[0].split("=", 1)[1], lines[1].split("=", 1)[1], [line.split("=", 1)[1] for line in lines[2:]]


def test_online_command_line_is_unchanged(checkout):
    args = ["--output_base=/tmp/ob", "test", "//tests/...", "--config=sm90", "--", "-k", "x"]
    _, python, passed = _run(checkout, args, offline="0")
    assert passed == args
    assert python == sys.executable
    assert not (checkout / ".bazelrc.offline").exists(), "online runs must not write the offline stand-ins' rc"


@pytest.mark.parametrize("command", ["build", "test", "run", "query", "cquery", "fetch", "sync", "coverage"])
def test_offline_adds_the_offline_config_after_the_command(checkout, command):
    _, _, passed = _run(checkout, ["--batch", command, "//x:y", "--", "arg"], offline="1")
    assert passed == ["--batch", command, "--config=offline", "//x:y", "--", "arg"]
    rc = (checkout / ".bazelrc.offline").read_text()
    expected = f"build:offline --override_repository=rules_cc={checkout.resolve()}/third_party/offline/rules_cc"
    assert expected in rc, f"expected {expected!r} in .bazelrc.offline, got:\n{rc}"


def test_offline_config_given_by_hand_is_not_added_again(checkout):
    args = ["query", "--config=offline", "//x:y"]
    _, _, passed = _run(checkout, args, offline="1")
    assert passed == args, "a second --config=offline makes Bazel warn 'configs were expanded more than once'"


@pytest.mark.parametrize("command", ["build", "version", "shutdown"])
def test_trust_store_is_a_startup_option_of_every_command(checkout, tmp_path, command):
    store = tmp_path / "cacerts"
    store.write_bytes(b"stand-in keystore")
    _, _, passed = _run(checkout, ["--batch", command, "//x:y"], offline="1", extra_env={"SPARSE_MLA_TRUSTSTORE": str(store)})
    offline = ["--config=offline"] if command == "build" else []
    assert passed == [f"--host_jvm_args=-Djavax.net.ssl.trustStore={store}", "--batch", command, *offline, "//x:y"]


def test_missing_trust_store_is_not_passed(checkout, tmp_path):
    args = ["build", "//x:y"]
    _, _, passed = _run(checkout, args, offline="0", extra_env={"SPARSE_MLA_TRUSTSTORE": str(tmp_path / "none")})
    assert passed == args


def test_npm_bazel_is_the_one_of_bazelversion(checkout, tmp_path):
    # No Bazel and no npm on PATH (only what the wrapper needs first): it names the version it would install.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    result = subprocess.run(
        [str(checkout / "tools" / "bazel"), "version"],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path), "SPARSE_MLA_CACHE": str(tmp_path / "cache")},
        capture_output=True, text=True, check=False,
    )
    version = (ROOT / ".bazelversion").read_text().strip()
    assert result.returncode == 1
    assert f"no npm to install Bazel {version} with" in result.stderr, result.stderr


@pytest.mark.parametrize("command", ["version", "shutdown", "info", "help"])
def test_commands_without_build_options_pass_unchanged_offline(checkout, command):
    _, python, passed = _run(checkout, [command], offline="1", extra_env={"PYTHON_BIN_PATH": ""})
    assert passed == [command]
    assert python == "", "no Python set-up for commands that load no repositories"


def test_bazel_real_wins_over_path(checkout):
    on_path = _executable(checkout.parent / "path_bin" / "bazel", STAND_IN_BAZEL)
    path = f"{on_path.parent}:{os.environ.get('PATH', '/bin:/usr/bin')}"
    used, _, _ = _run(checkout, ["version"], offline="0", extra_env={"PATH": path})
    assert used == str(checkout.parent / "real" / "bazel")
    used, _, _ = _run(checkout, ["version"], offline="0", extra_env={"PATH": path}, bazel_real=False)
    assert used == str(on_path)


def test_python_without_the_requirements_is_refused(checkout, tmp_path):
    bare_python = _executable(tmp_path / "bare" / "python3", f"#!/bin/sh\nexec {sys.executable} -S -I \"$@\"\n")
    result = subprocess.run(
        [str(checkout / "tools" / "bazel"), "build", "//x"],
        env={"PATH": os.environ.get("PATH", "/bin:/usr/bin"), "PYTHON_BIN_PATH": str(bare_python),
             "BAZEL_REAL": "/bin/false", "SPARSE_MLA_OFFLINE": "0", "HOME": str(tmp_path)},
        capture_output=True, text=True, check=False,
    )
    assert result.returncode != 0
    assert "lacks: torch==2.13.0" in result.stderr, result.stderr


def test_bad_offline_value_is_refused(checkout):
    result = subprocess.run(
        [str(checkout / "tools" / "bazel"), "build", "//x"],
        env={"PATH": os.environ.get("PATH", "/bin:/usr/bin"), "PYTHON_BIN_PATH": sys.executable,
             "BAZEL_REAL": "/bin/false", "SPARSE_MLA_OFFLINE": "yes", "HOME": str(checkout)},
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 2
    assert "SPARSE_MLA_OFFLINE expected 1, 0 or unset, got 'yes'" in result.stderr
