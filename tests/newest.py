"""What the patch relies on in DeepSpeed, the installed release against the table's newest (``nox -s newest``).

    python tests/newest.py REFERENCE_SDIST     REFERENCE_SDIST: deepspeed-X.tar.gz of releases.NEWEST_DEEPSPEED

Compares, in the installed DeepSpeed and in the reference release's source: ``deepspeed/runtime/lr_schedules.py``
(the scheduler classes the guard table describes) and the engine's optimizer-step method
(``releases.optimizer_step_method``, where step mode acts), read with ``ast`` from
``deepspeed/runtime/engine.py``. Prints, for each, "unchanged" or "CHANGED" with the unified diff, and a last
line that says whether anything changed. Exit 0 either way: a change is for a maintainer to read (CONTRIBUTING.md,
"Adding a DeepSpeed or accelerate release"), not a failure. Test tooling; standard library and the guard table.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib.util
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from accelerate_warmup_patch import releases

LR_SCHEDULES = "deepspeed/runtime/lr_schedules.py"
ENGINE = "deepspeed/runtime/engine.py"


def installed_source(relative: str) -> str:
    """A file of the installed deepspeed package, found without importing it."""
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        raise LookupError("deepspeed is not installed")
    package = Path(next(iter(spec.submodule_search_locations)))
    return (package.parent / relative).read_text()


def sdist_source(sdist: Path, relative: str) -> str:
    """A file of an sdist (``deepspeed-X/<relative>`` inside the tarball), read without unpacking it."""
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if member.name.split("/", 1)[-1] == relative and member.isfile():
                handle = archive.extractfile(member)
                if handle is not None:
                    return handle.read().decode()
    raise LookupError(f"{sdist.name} has no {relative}")


def method_source(module_source: str, cls: str, method: str) -> str:
    """The source of ``cls.method`` in a module's source; empty when the class has no such method."""
    for node in ast.walk(ast.parse(module_source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method:
                    return (ast.get_source_segment(module_source, item) or "") + "\n"
    return ""


def compare(what: str, reference: str, newest: str, old_label: str, new_label: str) -> bool:
    """Print whether ``what`` changed, with the unified diff; True when it did."""
    if reference == newest:
        print(f"{what}: unchanged")
        return False
    if not newest:
        print(f"{what}: CHANGED: gone in {new_label}")
        return True
    print(f"{what}: CHANGED:")
    sys.stdout.writelines(difflib.unified_diff(reference.splitlines(keepends=True), newest.splitlines(keepends=True),
                                               fromfile=old_label, tofile=new_label))
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path, help=f"the sdist of DeepSpeed {releases.NEWEST_DEEPSPEED}")
    args = parser.parse_args(argv)
    version = releases.installed("deepspeed") or "?"
    old, new = f"DeepSpeed {releases.NEWEST_DEEPSPEED} (the table's newest)", f"DeepSpeed {version} (installed)"
    print(f"What the patch relies on, {new} against {old}:")
    method = releases.optimizer_step_method(releases.NEWEST_DEEPSPEED) or "_take_model_step"
    changed = compare(LR_SCHEDULES, sdist_source(args.reference, LR_SCHEDULES), installed_source(LR_SCHEDULES),
                      f"{releases.NEWEST_DEEPSPEED}/{LR_SCHEDULES}", f"{version}/{LR_SCHEDULES}")
    changed |= compare(f"DeepSpeedEngine.{method} ({ENGINE}, step mode's moment)",
                       method_source(sdist_source(args.reference, ENGINE), "DeepSpeedEngine", method),
                       method_source(installed_source(ENGINE), "DeepSpeedEngine", method),
                       f"{releases.NEWEST_DEEPSPEED}/{ENGINE}", f"{version}/{ENGINE}")
    if changed:
        print(f"newest: CHANGED: DeepSpeed {version} changes what the patch relies on; read the diff above and the "
              "guard table's rows (CONTRIBUTING.md, 'Adding a DeepSpeed or accelerate release')")
    else:
        print(f"newest: nothing the patch relies on changed from DeepSpeed {releases.NEWEST_DEEPSPEED} to {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
