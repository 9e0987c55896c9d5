"""Hands ``import sparse_mla`` over to the package in ``py/sparse_mla/`` when this folder is found first.

Why this file exists: Bazel lays a repository's runfiles out under a folder named after the
repository, ``<runfiles>/sparse_mla/``, and a plain ``py_test`` puts ``<runfiles>`` first on
``sys.path``. With ``legacy_create_init`` (Bazel's default) it would also write an empty
``__init__.py`` here, turning this folder into a package ``sparse_mla`` that shadows the real one in
``py/sparse_mla/`` (``ModuleNotFoundError: No module named 'sparse_mla.reference'``). Shipping this
``__init__.py`` (target ``//:runfiles_import_shim``, a dependency of ``//py:sparse_mla``) keeps Bazel
from writing the empty one, and whichever folder Python finds first, it ends up with the one package.
"""

import importlib.util
import os
import sys

_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "py", "sparse_mla")

if __name__ == "sparse_mla":
    _spec = importlib.util.spec_from_file_location(
        __name__, os.path.join(_PACKAGE_DIR, "__init__.py"), submodule_search_locations=[_PACKAGE_DIR]
    )
    _package = importlib.util.module_from_spec(_spec)
    sys.modules[__name__] = _package  # the import statement returns what sys.modules holds after this file ran
    _spec.loader.exec_module(_package)
