"""Test isolation: no test reads or writes the user's caches or the repository's tuned schedules.

Tests that need a schedule database or a trained predictor create their own
(``monkeypatch.setenv``) and start from an empty one otherwise, so results do
not depend on what a previous tuning run left behind.
"""

import atexit
import os
import shutil
import tempfile

import pytest

_ROOT = tempfile.mkdtemp(prefix="tvm_cim_tests_")
atexit.register(shutil.rmtree, _ROOT, True)
os.environ["TVM_PIM_CACHE"] = os.path.join(_ROOT, "cache")
os.environ["TVM_PIM_SCHEDULES"] = os.path.join(_ROOT, "schedules")


@pytest.fixture(scope="session")
def metaschedule_ready():
    """Pay meta-schedule's one-time start-up before the tuning tests.

    The first tuning run in a process imports ``tvm.s_tir.tensor_intrin``,
    which parses hundreds of TVMScript intrinsics: about 20 s of TVM's own
    start-up.  Tests that tune use this fixture, so that each measures only
    its own work (about a second).
    """
    import tvm.s_tir.tensor_intrin  # noqa: F401
