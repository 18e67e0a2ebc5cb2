"""Run DeepSpeed's own lr-scheduler unit tests against an installed DeepSpeed release, patched or not.

An oracle nobody here wrote: upstream's ``tests/unit/runtime/test_lr_schedulers.py``, with the
``tests/conftest.py``, ``tests/pytest.ini`` and ``tests/unit`` helpers it imports, is read out of a
git mirror of DeepSpeed (no work tree needed) into a temporary folder at run time and run there by
the chosen venv's Python on CPU (``DS_ACCELERATOR=cpu``). No upstream file is kept in this project.

    python tests/upstream/run_upstream_suite.py --mirror /path/to/DeepSpeed.git \\
        --python .nox/tests-deepspeed-0-15-2/bin/python --patched --junit out.xml [-k EXPR]

``--patched`` sets ``ACCELERATE_WARMUP_PATCH=reset`` for pytest and everything it starts (the
package's .pth activates the patch in each interpreter, the distributed tests' forkserver children
included); ``--unpatched`` removes the variable. Before pytest runs, a probe under the same
environment builds a WarmupLR on an optimizer whose lr is 1.0 and reports the lr the optimizer holds
afterwards, in this process, in a spawned child and in a forkserver child (the start method of
upstream's DistributedTest), together with ``accelerate_warmup_patch.status()``; ``awp_probe.py``
(loaded into pytest with ``-p``) prints the same in the pytest process's report header. A probe that
contradicts ``--patched``/``--unpatched`` stops the run (exit 3) unless ``--no-probe-check``.

Developer tool, not CI: a run takes about 12 minutes per release on two CPU cores, and the venv
may have to fetch test dependencies from the package registry. See docs/upstream-suite.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# master at the newest commit the mirror holds; see docs/upstream-suite.md for why this one
DEFAULT_REV = "edaa7221267243c7be7fb49c5d5f5c4fb97b4641"
SUITE = "tests/unit/runtime/test_lr_schedulers.py"
# always taken; tests/unit modules the suite imports are added by following its imports
BASE_FILES = ("tests/pytest.ini", "tests/conftest.py", "tests/unit/__init__.py", SUITE)

_UNIT_IMPORT = re.compile(r"^\s*(?:from\s+(unit(?:\.\w+)+|\.\w+(?:\.\w+)*)\s+import|import\s+(unit(?:\.\w+)+))",
                          re.MULTILINE)

PROBE = r"""
import json, multiprocessing as mp, os, sys

def probe():
    import torch
    from deepspeed.runtime.lr_schedules import WarmupLR
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    WarmupLR(opt, warmup_min_lr=0.0, warmup_max_lr=1.0, warmup_num_steps=10)
    out = {"pid": os.getpid(), "lr_after_construction": opt.param_groups[0]["lr"],
           "package_imported": "accelerate_warmup_patch" in sys.modules}
    if out["package_imported"]:
        import accelerate_warmup_patch
        st = accelerate_warmup_patch.status()
        keep = ("mode", "patched", "applied_by", "fixes_applied")
        out["status"] = {k: (str(v) if k == "mode" else v) for k, v in st.items() if k in keep}
    return out

def child(queue):
    queue.put(probe())

if __name__ == "__main__":
    result = {"main": probe()}
    for method in ("spawn", "forkserver"):
        ctx = mp.get_context(method)
        queue = ctx.Queue()
        proc = ctx.Process(target=child, args=(queue,))
        proc.start()
        result[method] = queue.get(timeout=120)
        proc.join()
    import deepspeed
    result["deepspeed"] = deepspeed.__version__
    print("AWP_PROBE " + json.dumps(result, default=str))
"""


def git_show(mirror: str, rev: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", mirror, "show", f"{rev}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def extract(mirror: str, rev: str, dest: Path) -> list[str]:
    """Write the suite, conftest, pytest.ini and every tests/unit module they import (transitively)."""
    todo, done = list(BASE_FILES), []
    while todo:
        path = todo.pop(0)
        if path in done:
            continue
        text = git_show(mirror, rev, path)
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        done.append(path)
        if not path.endswith(".py"):
            continue
        for absolute, plain in _UNIT_IMPORT.findall(text):
            name = absolute or plain
            if name.startswith("."):  # relative import inside tests/unit
                module = str(Path(path).parent / name.lstrip(".").replace(".", "/"))
            else:
                module = "tests/" + name.replace(".", "/")
            candidate = module + ".py"
            try:
                git_show(mirror, rev, candidate)
            except subprocess.CalledProcessError:
                continue  # a package or a name, not a module file
            todo.append(candidate)
    return done


def release_of(python: str, env: dict[str, str]) -> str:
    clean = {k: v for k, v in env.items() if k != "ACCELERATE_WARMUP_PATCH"}
    return subprocess.run([python, "-c", "from importlib.metadata import version; print(version('deepspeed'))"],
                          check=True, capture_output=True, text=True, env=clean).stdout.strip()


def summarize(junit: Path) -> int:
    """Print the counts and one line per failing test; returns the number of failures and errors."""
    root = ET.parse(junit).getroot()
    cases = root.iter("testcase")
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    bad = []
    for case in cases:
        test_id = f"{case.get('classname')}::{case.get('name')}"
        kinds = [child.tag for child in case]
        if "failure" in kinds or "error" in kinds:
            node = case.find("failure") if "failure" in kinds else case.find("error")
            counts["failed" if node.tag == "failure" else "error"] += 1
            message = (node.get("message") or node.text or "").strip().splitlines()
            bad.append(f"  {node.tag.upper()} {test_id}: {message[0][:300] if message else ''}")
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    print("upstream suite:", ", ".join(f"{v} {k}" for k, v in counts.items()))
    print("\n".join(bad))
    return counts["failed"] + counts["error"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", required=True, help="DeepSpeed's git directory (a bare mirror is enough)")
    parser.add_argument("--rev", default=DEFAULT_REV, help=f"the upstream revision to take the tests from "
                        f"(default {DEFAULT_REV[:10]}, see docs/upstream-suite.md)")
    parser.add_argument("--python", default=sys.executable, help="the venv's Python: DeepSpeed, torch, pytest, "
                        "this package installed")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--patched", action="store_true", help="ACCELERATE_WARMUP_PATCH=reset")
    group.add_argument("--unpatched", action="store_true", help="ACCELERATE_WARMUP_PATCH unset")
    parser.add_argument("--junit", type=Path, help="write pytest's junit XML here")
    parser.add_argument("-k", dest="keyword", help="passed to pytest -k")
    parser.add_argument("--torch-extensions-dir", help="default: .nox/_torch_extensions/deepspeed-<release>")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder and print its path")
    parser.add_argument("--no-probe-check", action="store_true", help="run even if the probe contradicts the mode")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    args = parser.parse_args()

    mirror = str(Path(args.mirror).resolve())
    if Path(mirror, ".git").is_dir():
        mirror = str(Path(mirror, ".git"))
    rev = subprocess.run(["git", "--git-dir", mirror, "rev-parse", "--verify", f"{args.rev}^{{commit}}"],
                         check=True, capture_output=True, text=True).stdout.strip()

    env = dict(os.environ)
    env.pop("ACCELERATE_WARMUP_PATCH", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # hundreds of interpreters: let them reuse .pyc files
    release = release_of(args.python, env)
    env.update(DS_ACCELERATOR="cpu", PYTHONUNBUFFERED="1", TORCH_EXTENSIONS_DIR=args.torch_extensions_dir
               or str(ROOT / ".nox" / "_torch_extensions" / f"deepspeed-{release}"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    if args.patched:
        env["ACCELERATE_WARMUP_PATCH"] = "reset"
    mode = "patched" if args.patched else "unpatched"
    print(f"DeepSpeed {release} {mode}; tests from {rev}; TORCH_EXTENSIONS_DIR={env['TORCH_EXTENSIONS_DIR']}",
          flush=True)

    work = Path(tempfile.mkdtemp(prefix="ds-upstream-"))
    try:
        for path in extract(mirror, rev, work):
            print("  extracted", path)
        tests = work / "tests"

        (work / "awp_preflight.py").write_text(PROBE)  # a file: spawned children re-import __main__
        probe = subprocess.run([args.python, str(work / "awp_preflight.py")], cwd=tests, env=env,
                               capture_output=True, text=True, timeout=600)
        line = next((ln for ln in probe.stdout.splitlines() if ln.startswith("AWP_PROBE ")), None)
        print(line or f"probe failed:\n{probe.stdout}\n{probe.stderr}", flush=True)
        if line and not args.no_probe_check:
            import json

            result = json.loads(line.split(" ", 1)[1])
            for where in ("main", "spawn", "forkserver"):
                imported = result[where]["package_imported"]
                if imported != args.patched:
                    print(f"probe: in the {where} process the package is {'' if imported else 'not '}imported, "
                          f"but the run is {mode}", file=sys.stderr)
                    return 3
                state = str(result[where].get("status", {}).get("mode", ""))
                if args.patched and "reset" not in state.lower():
                    print(f"probe: in the {where} process the patch's mode is {state!r}, not reset", file=sys.stderr)
                    return 3

        command = [args.python, "-m", "pytest", "-p", "no:cacheprovider", "-p", "awp_probe", "-rfEs",
                   "unit/runtime/test_lr_schedulers.py"]
        if args.keyword:
            command += ["-k", args.keyword]
        junit = args.junit.resolve() if args.junit else work / "junit.xml"
        command += ["--junitxml", str(junit), *args.pytest_args]
        print("$", " ".join(command), flush=True)
        code = subprocess.run(command, cwd=tests, env=env).returncode
        if junit.exists():
            summarize(junit)
        return code
    finally:
        if args.keep:
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
