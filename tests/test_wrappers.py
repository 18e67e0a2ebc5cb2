"""A wrapper is still the function: the user's errors stay the user's, and what worked on the original
(pickling by reference, deepcopy, ``inspect.signature``, ``__doc__``) works on every wrapper installed.

Each program compares, in one real interpreter, the patched callables with the same names after
``remove()``: the unpatched release is the reference, whatever the release.
"""

from __future__ import annotations

import json

import pytest
from conftest import installed, run_child

installed("deepspeed")  # every test here runs real DeepSpeed: without it the module skips



@pytest.mark.parametrize("strict", ["", "1"], ids=["default", "strict"])
def test_a_users_wrong_arguments_raise_the_originals_error_unchanged_and_unannounced(strict):
    proc = run_child("user_errors.py", env={"ACCELERATE_WARMUP_PATCH_STRICT": strict})
    assert proc.returncode == 0, proc.stderr[-3000:]
    patched, unpatched, said = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert all(unpatched.values()), unpatched  # every call is a user's error on this release
    assert patched == unpatched
    assert said == []




def test_every_wrapper_pickles_by_reference_copies_and_introspects_as_the_original():
    proc = run_child("pickling.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    patched, unpatched, by_reference, rewrapped = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert patched == unpatched
    assert by_reference == {key: True for key in patched}
    assert rewrapped == {key: True for key in patched}
