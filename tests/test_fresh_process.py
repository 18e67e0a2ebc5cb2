"""The suite's fresh processes (tests/fresh_process.py): a forked run is what a new interpreter runs."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import fresh_process
import pytest
from conftest import HERE, Spec, installed, run_specs

installed("deepspeed")  # the harness's runs are real engines: without DeepSpeed the module skips

STACK = ("torch", "transformers", "deepspeed", "accelerate", "accelerate_warmup_patch", "wrapt")


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def _run(script: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return fresh_process.run([script, "an argument"], {**os.environ, **(env or {})}, str(HERE), timeout)


def test_a_forked_run_has_imported_torch_and_transformers_alone_and_a_start_up_setting_gets_a_new_interpreter(
        tmp_path: Path) -> None:
    script = _script(tmp_path, f"""
        import json, os, sys
        print(json.dumps({{"loaded": [m for m in {STACK!r} if m in sys.modules], "argv": sys.argv[1:],
                          "cwd": os.getcwd(), "path0": sys.path[0], "mine": os.environ.get("AWP_MINE")}}))
        """)
    forked = json.loads(_run(script, {"AWP_MINE": "1"}).stdout)
    assert forked == {"loaded": ["torch", "transformers"], "argv": ["an argument"], "cwd": str(HERE),
                      "path0": str(tmp_path), "mine": "1"}
    for setting in ({"ACCELERATE_WARMUP_PATCH": "off"}, {"ACCELERATE_WARMUP_PATCH_STRICT": "1"},
                    {"PYTHONWARNINGS": "ignore"}):
        new = json.loads(_run(script, setting).stdout)
        assert new["loaded"] == (["accelerate_warmup_patch"] if "ACCELERATE_WARMUP_PATCH" in setting else [])


def test_a_forked_run_exits_and_reports_as_an_interpreter_does(tmp_path: Path) -> None:
    exits = _run(_script(tmp_path, """
        import atexit, sys
        atexit.register(lambda: print("at exit", flush=True))
        print("out"); print("err", file=sys.stderr)
        sys.exit(3)
        """))
    assert (exits.returncode, exits.stdout, exits.stderr) == (3, "out\nat exit\n", "err\n")
    raises = _run(_script(tmp_path, "raise ValueError('boom')\n"))
    assert raises.returncode == 1 and raises.stderr.rstrip().endswith("ValueError: boom")
    with pytest.raises(subprocess.TimeoutExpired):
        _run(_script(tmp_path, "import signal; signal.pause()\n"), timeout=2)  # waits until it is killed
    assert _run(_script(tmp_path, "print('after a timeout')\n")).stdout == "after a timeout\n"


def test_a_forked_harness_run_equals_a_new_interpreters(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = (Spec(patch="before"), Spec(path="accelerate", patch="before", grad_accum=2))
    forked = run_specs(*specs).data
    monkeypatch.setenv("AWP_FRESH_INTERPRETERS", "1")
    assert forked == run_specs(*specs).data
