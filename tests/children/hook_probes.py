"""The import hook, seen from a new interpreter: ``hook_probes.py PROBE`` prints one JSON line
(tests/test_hooks.py). Each probe imports the package and the frameworks itself, in its own order: this file
imports neither at its top."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from typing import Any

# the modules the patch waits for, as status() names them
WAITS_FOR = ["deepspeed", "deepspeed.launcher.multinode_runner"]


def finders() -> list[Any]:
    return [f for f in sys.meta_path if type(f).__module__.startswith("accelerate_warmup_patch")]


def find_spec_is_not_an_import() -> None:
    assert importlib.util.find_spec("deepspeed") is not None
    loaded = sorted(m for m in sys.modules if m.startswith(("accelerate_warmup_patch.", "wrapt")))
    import deepspeed

    print(json.dumps([loaded, hasattr(deepspeed.initialize, "__wrapped__")]))


def finder_leaves_once_nothing_is_pending() -> None:
    before = len(finders())
    import deepspeed  # noqa: F401

    during = len(finders())
    for name in WAITS_FOR:
        importlib.import_module(name)
    import accelerate_warmup_patch as awp

    print(json.dumps([before, during, len(finders()), awp.status()["waiting_for"]]))


def remove_from_the_api_module() -> None:
    from accelerate_warmup_patch.api import remove

    remove()
    left = len(finders())
    import deepspeed

    import accelerate_warmup_patch as awp

    print(json.dumps([left, hasattr(deepspeed.initialize, "__wrapped__"), awp.status()["mode"]]))


def reload_the_package() -> None:
    import accelerate_warmup_patch as awp

    importlib.reload(awp)
    importlib.reload(awp)
    left = len(finders())
    import deepspeed  # noqa: F401

    print(json.dumps([left, awp.status()["patched"].count("deepspeed.initialize")]))


def reload_deepspeed() -> None:
    import deepspeed

    import accelerate_warmup_patch as awp

    awp.apply()
    listed = "deepspeed.initialize" in awp.status()["patched"]
    importlib.reload(deepspeed)
    still = "deepspeed.initialize" in awp.status()["patched"]
    wrapped = hasattr(deepspeed.initialize, "__wrapped__")
    awp.apply()  # wraps what the reload put there
    again = hasattr(deepspeed.initialize, "__wrapped__") and "deepspeed.initialize" in awp.status()["patched"]
    print(json.dumps([listed, still, wrapped, again]))


def below_the_floor() -> None:
    import deepspeed

    deepspeed.__version__ = "0.8.3"  # no DeepSpeed older than the floor installs beside torch 2.13
    from deepspeed.runtime import lr_schedules

    import accelerate_warmup_patch as awp

    awp.apply()
    print(json.dumps([awp.status()["patched"], type(vars(lr_schedules.WarmupLR)["__init__"]).__name__,
                      type(deepspeed.initialize).__name__]))


def armed_by_sitecustomize() -> None:
    import deepspeed

    import accelerate_warmup_patch as awp

    print(json.dumps([hasattr(deepspeed.initialize, "__wrapped__"), awp.status()["applied_by"]]))


PROBES = {probe.__name__: probe for probe in (find_spec_is_not_an_import, finder_leaves_once_nothing_is_pending,
                                               remove_from_the_api_module, reload_the_package, reload_deepspeed,
                                               below_the_floor, armed_by_sitecustomize)}
PROBES[sys.argv[1]]()
