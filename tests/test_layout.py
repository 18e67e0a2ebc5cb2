"""The house shows what runs in a job: the runtime beside ``__init__``, the command line in ``cli/``, and no
import from the runtime up into the command line."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from conftest import run_python

PACKAGE = Path(__file__).resolve().parent.parent / "accelerate_warmup_patch"
# `python -m accelerate_warmup_patch`: the one runtime-floor file that is the command line's door
DOORS = {"__main__.py"}


def _imports(path: Path) -> set[str]:
    """Every module a file imports, relative imports spelled from the package (``..cli`` from cli/ too)."""
    names: set[str] = set()
    package = "accelerate_warmup_patch" + ("" if path.parent == PACKAGE else "." + path.parent.name)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_no_runtime_module_imports_the_command_line():
    runtime = [p for p in PACKAGE.rglob("*.py") if p.name not in DOORS and "cli" not in p.relative_to(PACKAGE).parts]
    assert len(runtime) >= 12, runtime
    upward = {p.name: sorted(n for n in _imports(p) if n.startswith("accelerate_warmup_patch.cli"))
              for p in runtime}
    assert {name: found for name, found in upward.items() if found} == {}


def test_the_command_line_lives_in_its_subpackage():
    cli = {p.name for p in (PACKAGE / "cli").glob("*.py")}
    assert {"main.py", "doctor.py", "doctor_config.py", "status_report.py", "demo.py", "child.py"} <= cli
    assert (PACKAGE / "cli" / "audit" / "__init__.py").is_file()  # the audit: a subpackage, one job a module
    assert not {"doctor.py", "demo.py", "child.py", "audit.py", "status_report.py"} & {p.name for p in
                                                                                        PACKAGE.glob("*.py")}


@pytest.mark.usefixtures("deepspeed")
def test_a_patched_training_process_loads_nothing_of_the_command_line():
    proc = run_python(
        "import json, sys, torch\n"
        "import accelerate_warmup_patch as awp\n"
        "import deepspeed, accelerate.utils.deepspeed\n"
        "from deepspeed.runtime.lr_schedules import WarmupLR\n"
        "optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)\n"
        "WarmupLR(optimizer, warmup_num_steps=5); awp.status()\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('accelerate_warmup_patch'))))")
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "accelerate_warmup_patch.api" in loaded
    assert [m for m in loaded if m.startswith("accelerate_warmup_patch.cli")] == []
