"""Test isolation: no test reads or writes the user's caches or the repository's tuned schedules.

Tests that need a schedule database or a trained predictor create their own
(``monkeypatch.setenv``) and start from an empty one otherwise, so results do
not depend on what a previous tuning run left behind.
"""

import atexit
import os
import shutil
import tempfile

_ROOT = tempfile.mkdtemp(prefix="tvm_cim_tests_")
atexit.register(shutil.rmtree, _ROOT, True)
os.environ["TVM_PIM_CACHE"] = os.path.join(_ROOT, "cache")
os.environ["TVM_PIM_SCHEDULES"] = os.path.join(_ROOT, "schedules")
