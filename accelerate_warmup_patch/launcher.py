"""Carry the switch to every node of a multi-node ``deepspeed`` launch.

DeepSpeed's launcher (``deepspeed --hostfile``, and ``accelerate launch`` across machines, which
calls it) sends a variable to the other nodes only when its name starts with one of runner.py's
EXPORT_ENVS or it is a line of ``.deepspeed_env``: ACCELERATE_WARMUP_PATCH is neither, so without
this module only the launching shell knows it. Loaded when ``deepspeed.launcher.multinode_runner``
is imported in an armed process (the ``deepspeed`` command is one: the .pth arms it).

``MultiNodeRunner.__init__`` is wrapped: every runner class of every release calls it first and it
creates ``self.exports``, the dict each runner's ``get_cmd`` writes into the command for the nodes
(``multinode_runners.MULTINODE_RUNNERS``). Right after it, the variables the launching process has set go in
with its current values, ``off`` as ``off``. runner.py then adds EXPORT_ENVS and ``.deepspeed_env``:
a line there for the same name wins, as it does over every variable DeepSpeed exports.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from types import MappingProxyType, ModuleType
from typing import Any

from . import failures, log, multinode_runners, releases, settings, wrapping

MODULE = "deepspeed.launcher.multinode_runner"

CARRIED = (settings.ENV_MODE, settings.ENV_STRICT, settings.ENV_RECORD)

# Runners that write every export into one list argument, and the character that separates its items:
# srun --export=ALL,NAME=VALUE,... splits at every comma, quoted or not, so a value holding one would
# end early and name another variable (tests/test_real_launchers.py, Slurm 22.05). Such a value stays
# out of the list; the list's ALL passes this process's value on as it is.
LIST_SEPARATOR = MappingProxyType({"slurm": ","})


def patch_runners(module: ModuleType) -> None:
    """Wrap ``MultiNodeRunner.__init__`` of ``deepspeed.launcher.multinode_runner``."""
    version = wrapping.deepspeed_version()
    if releases.deepspeed_support(version) is releases.Support.UNSUPPORTED:
        return  # targets.patch_deepspeed has said, once, that nothing is patched on this release
    base = getattr(module, "MultiNodeRunner", None)
    if not isinstance(base, type) or "__init__" not in vars(base):
        failures.report("launcher:base", what="finding MultiNodeRunner.__init__", error=LookupError(
            f"deepspeed.launcher.multinode_runner of DeepSpeed {version} has no MultiNodeRunner.__init__"),
            consequence="ACCELERATE_WARMUP_PATCH is not exported to the other nodes")
        return
    wrapping.wrap(base, "__init__", _init_wrapper)


def _init_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)  # the original first: it creates the exports dict
    original = getattr(wrapped, "__func__", wrapped)  # wrapt hands us the bound method
    if not wrapping.is_wrapped(original):
        return result  # removed, with someone else's wrapper stacked on ours
    try:
        carry(instance)
    except failures.PatchError:
        raise
    except Exception as error:
        failures.report("launcher:carry", what="exporting ACCELERATE_WARMUP_PATCH to the other nodes", error=error,
                        consequence="the nodes use their own value; the launch goes on")
    return result


def carry(runner: Any) -> dict[str, str]:
    """Put this process's ACCELERATE_WARMUP_PATCH* values into ``runner``'s exports; returns them."""
    values = {name: os.environ[name] for name in CARRIED if os.environ.get(name, "").strip()}
    if not values:
        return values
    version = wrapping.deepspeed_version()
    name = type(runner).__name__
    # by class, through the MRO: a user's subclass of PDSHRunner still goes through a shell
    fact = next(filter(None, (multinode_runners.runner_fact(k.__name__, version) for k in type(runner).__mro__)), None)
    exports = runner.exports
    if not isinstance(exports, dict):
        raise TypeError(f"{name}.exports is a {type(exports).__name__}, not a dict")
    separator = LIST_SEPARATOR.get(fact.value.launcher, "") if fact is not None else ""
    for key, value in list(values.items()):
        if fact is None:  # a runner the table does not know: its release's own convention
            runner.add_export(key, value)
        elif separator and separator in value:
            del values[key]
            log.warn_once(f"launcher:{name}:{key}", "%s leaves %s out of the list it exports: its value %r holds %r, "
                          "where the list starts another variable; the list's ALL passes it on as it is",
                          name, key, value, separator)
        else:  # add_export's quoting differs per release (multinode_runners.ADD_EXPORT_QUOTING): written here
            exports[key] = shlex.quote(value) if fact.value.remote_shell else value
    if not values:
        return values
    # a value that is not plain printable text is shown as repr() shows it: a newline in it would start a line
    # that looks like another tool's log line
    listed = ", ".join(f"{key}={value if value.isprintable() else repr(value)}" for key, value in values.items())
    if fact is not None and not fact.value.carries:
        log.warn_once(f"launcher:{name}", "%s of DeepSpeed %s leaves its exports out of the command it builds "
                      "(%s); %s reaches the other nodes only if the launcher passes its own environment on",
                      name, version, fact.source, listed)
        return values
    how = fact.value.syntax if fact is not None else "add_export (a runner the guard table does not know)"
    log.info("%s exports %s to every node (%s)", name, listed, how)
    return values
