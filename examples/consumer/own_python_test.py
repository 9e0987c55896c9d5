"""The monorepo's own Python test: it runs the monorepo's python3, not sparse_mla's interpreter.

sparse_mla registers no Python toolchain, so this plain py_test gets Bazel's default one: the
`python3` on the strict action PATH (/bin, /usr/bin, /usr/local/bin), which needs no PyTorch.
"""

import os
import sys
import unittest

STRICT_PATH = ("/bin", "/usr/bin", "/usr/local/bin")


class OwnPythonTest(unittest.TestCase):
    def test_runs_the_python3_of_the_strict_path(self):
        self.assertIn(os.path.dirname(sys.executable), STRICT_PATH, sys.executable)

    def test_is_no_virtual_environment(self):
        # sparse_mla's interpreter on a CPU machine is the virtual environment tools/python_env.sh makes.
        self.assertEqual(sys.prefix, sys.base_prefix, "expected the system python3, got the venv at " + sys.prefix)


if __name__ == "__main__":
    unittest.main()
