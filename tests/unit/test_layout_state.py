"""The process's state lives in one place: state.py (and the start-up module's post-import hooks).

A runtime module (the package's own files, not the command line in cli/) may bind at its top level only what
cannot change: constants and f-strings, tuples and frozensets of them, read-only mappings
(``types.MappingProxyType``), instances of the package's frozen dataclasses and enums, compiled regular
expressions and struct layouts, type aliases and type variables, and the logging objects a library makes once
(a logger, a handler, a formatter). A value whose annotation says it is a tuple or a frozenset is checked by the type
checker, so it is allowed too. Any other value (a list, a dict, a set, an instance of anything else) is
mutable state, and so is a ``global`` statement: both belong in state.py's ``STATE``. The start-up module
keeps its hooks' bookkeeping (``_pending`` and the rest): it must exist before anything else of the package is
loaded. Read
from the source, with the standard library.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "accelerate_warmup_patch"
OWNER = "state.py"
# the start-up module's post-import hooks (issue 36: they may stay where the start-up budget needs them)
START_UP_HOOKS = {("__init__.py", name) for name in ("_pending", "_ran", "_importers", "_lock", "_looking_up")}
CALLS = {"frozenset", "tuple", "MappingProxyType", "types.MappingProxyType", "re.compile", "struct.Struct", "TypeVar",
         "logging.getLogger", "logging.StreamHandler", "logging.Formatter"}
IMMUTABLE_ANNOTATIONS = ("tuple", "frozenset", "str", "int", "float", "bool")


def _runtime_modules() -> list[Path]:
    """The runtime's files: the package's own and its subpackages' (the upstream changes), not the command line's."""
    return sorted(p for p in PACKAGE.rglob("*.py") if "cli" not in p.relative_to(PACKAGE).parts)


def _frozen_classes() -> set[str]:
    """The package's frozen dataclasses and enums, by name."""
    names: set[str] = set()
    for path in _runtime_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            frozen = any(isinstance(d, ast.Call) and ast.unparse(d.func).endswith("dataclass") and any(
                k.arg == "frozen" and isinstance(k.value, ast.Constant) and k.value.value is True for k in d.keywords)
                for d in node.decorator_list)
            enum = any(ast.unparse(base).endswith("Enum") for base in node.bases)
            if frozen or enum:
                names.add(node.name)
    return names


def _immutable(value: ast.expr, frozen: set[str]) -> bool:
    if isinstance(value, (ast.Constant, ast.JoinedStr, ast.Name, ast.Attribute, ast.Subscript)):
        return True  # a constant, a name for another one, a type alias (tuple[int, float])
    if isinstance(value, ast.BinOp):
        return _immutable(value.left, frozen) and _immutable(value.right, frozen)
    if isinstance(value, ast.Tuple):
        return all(_immutable(item, frozen) for item in value.elts)
    if isinstance(value, ast.Call):
        called = ast.unparse(value.func)
        return called in CALLS or called.rpartition(".")[2] in frozen
    return False


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """The module's own statements, also those inside its top-level ``if`` and ``try`` blocks."""
    found: list[ast.stmt] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        found.append(node)
        if isinstance(node, ast.If):
            pending.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            pending.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
    return found


def mutable_globals(path: Path, frozen: set[str]) -> list[str]:
    """``name (line)`` for each module-level mutable object and each ``global`` statement of ``path``."""
    tree = ast.parse(path.read_text())
    found: list[str] = []
    for node in _top_level(tree):
        if isinstance(node, ast.Assign):
            targets, value, annotation = node.targets, node.value, None
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value, annotation = [node.target], node.value, ast.unparse(node.annotation).strip("'\"")
        else:
            continue
        for target in targets:
            name = ast.unparse(target)
            if (path.name, name) in START_UP_HOOKS:
                continue
            if annotation is not None and annotation.startswith(IMMUTABLE_ANNOTATIONS):
                continue
            if not _immutable(value, frozen):
                found.append(f"{name} ({path.name}:{node.lineno})")
    for walked in ast.walk(tree):
        if isinstance(walked, ast.Global):
            found.append(f"global {', '.join(walked.names)} ({path.name}:{walked.lineno})")
    return found


def test_no_runtime_module_but_the_states_owner_keeps_mutable_globals() -> None:
    frozen = _frozen_classes()
    modules = [p for p in _runtime_modules() if p.name != OWNER]
    assert len(modules) >= 12, modules
    assert [found for path in modules for found in mutable_globals(path, frozen)] == []


def test_the_rule_sees_each_kind_of_mutable_global(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text("import threading\nNAMES = []\nBY_NAME: dict[str, int] = {}\nSEEN = set()\n"
                      "LOCK = threading.RLock()\nKNOWN = ('a', 'b')\nLIMIT: int = 3\n"
                      "def switch():\n    global LIMIT\n    LIMIT = 4\n")
    assert mutable_globals(module, set()) == ["NAMES (module.py:2)", "BY_NAME (module.py:3)", "SEEN (module.py:4)",
                                              "LOCK (module.py:5)", "global LIMIT (module.py:9)"]
