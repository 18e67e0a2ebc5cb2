"""DeepSpeed builds that are not releases, made in a test from the installed release's own code.

A build is a folder holding what differs from the installed release: its ``deepspeed/runtime/lr_schedules.py``
(the installed one, edited as the build's code differs), its ``deepspeed/git_version_info_installed.py`` (the
installed one, with the build's version string) and a ``deepspeed-<version>.dist-info``. With the folder first on
``PYTHONPATH`` (``env``), an interpreter runs the build: its ``sitecustomize.py`` (tests/build_site.py) loads those
two modules from the folder and every other one from the installed package, so the engine, its comm op and the
rest are the installed release's, as they are in the build. Why not a copy of the whole package: DeepSpeed
JIT-compiles its CPU comm op from sources found beside its own files (``OpBuilder.deepspeed_src_path``:
``Path(__file__).parent.parent``, 0.15.2's op_builder/builder.py), and torch's extension loader keys a build on
those paths, so every copy in a new folder would compile it again (1-2 min each).

The edits are written from the upstream changes' descriptions (upstream.CHANGES, issue #46): no
upstream code is copied into the project; each edit asserts that it found what it changes.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

SCHEDULES = ("deepspeed", "runtime", "lr_schedules.py")
VERSION = ("deepspeed", "git_version_info_installed.py")
ENGINE = ("deepspeed", "runtime", "engine.py")
RECOVERY = ("deepspeed", "utils", "zero_to_fp32.py")


def _installed(parts: Sequence[str]) -> Path:
    spec = importlib.util.find_spec("deepspeed")
    assert spec is not None and spec.origin is not None, "DeepSpeed is not installed"
    return Path(spec.origin).parent.joinpath(*parts[1:])


def make(folder: Path, version: str, *edits: Callable[[str], str],
         engine: Sequence[Callable[[str], str]] = ()) -> Path:
    """A build in ``folder``: the installed lr_schedules.py with ``edits`` applied (and engine.py with ``engine``'s,
    where given), labelled ``version``."""
    (folder / "deepspeed" / "runtime").mkdir(parents=True, exist_ok=True)
    for parts, changes in ((SCHEDULES, edits), (ENGINE, engine)):
        if parts is SCHEDULES or changes:
            source = _installed(parts).read_text()
            for edit in changes:
                source = edit(source)
            folder.joinpath(*parts).write_text(source)
    if engine:  # engine.py copies this script beside a ZeRO save from its own folder (_copy_recovery_script)
        folder.joinpath(*RECOVERY).parent.mkdir(parents=True)
        shutil.copy(_installed(RECOVERY), folder.joinpath(*RECOVERY))
    label = re.sub(r"(?m)^version\s*=.*$", f"version={version!r}", _installed(VERSION).read_text())
    assert f"version={version!r}" in label, "the installed git_version_info_installed.py has no version line"
    folder.joinpath(*VERSION).write_text(label)
    metadata = folder / f"deepspeed-{version}.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text(f"Metadata-Version: 2.1\nName: deepspeed\nVersion: {version}\n")
    shutil.copy(Path(__file__).parent / "build_site.py", folder / "sitecustomize.py")
    return folder


def env(folder: Path) -> dict[str, str]:
    """The environment of an interpreter that runs the build in ``folder`` (before the paths it had)."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, (str(folder), os.environ.get("PYTHONPATH"))))}


def _class(source: str, name: str) -> tuple[int, int]:
    """Where class ``name`` starts and ends in ``source`` (up to the next top-level class)."""
    start = source.index(f"\nclass {name}(")
    following = source.find("\nclass ", start + 1)
    return start, following if following != -1 else len(source)


def _in_class(source: str, name: str, old: str, new: str) -> str:
    start, end = _class(source, name)
    body = source[start:end]
    assert body.count(old) == 1, f"{old!r} is not once in {name}"
    return source[:start] + body.replace(old, new) + source[end:]


def warmup_start_fix(source: str) -> str:
    """WarmupLR's part of 0.15.3's fix (PR #6597, as upstream.CHANGES describes it), cherry-picked: the
    constructor writes get_lr() into every group at last_batch_iteration -1, and get_lr() before the first step
    returns min_lrs."""
    anchor = "math.log(self.warmup_num_steps)\n        self.last_batch_iteration = last_batch_iteration\n"
    source = _in_class(source, "WarmupLR", anchor, anchor +
                       "        if last_batch_iteration == -1:  # cherry-picked start fix\n"
                       "            for group, lr in zip(self.optimizer.param_groups, self.get_lr()):\n"
                       "                group['lr'] = lr\n"
                       "            self._last_lr = [group['lr'] for group in self.optimizer.param_groups]\n")
    return _in_class(source, "WarmupLR", "            return [0.0]\n", "            return self.min_lrs\n")


def tensor_step(source: str) -> str:
    """Intel Gaudi's change to WarmupLR.step (issue #46's description of its 0.14.4 fork): where a group holds a
    tensor lr, the step writes a tensor (a new one, of that tensor's dtype and device)."""
    assert source.count("\nimport math\n") == 1, "lr_schedules.py imports math otherwise"
    source = source.replace("\nimport math\n", "\nimport math\nimport torch\n")
    return _in_class(source, "WarmupLR", "            param_group['lr'] = lr\n",
                     "            if isinstance(param_group['lr'], torch.Tensor):  # the vendor's change\n"
                     "                lr = torch.tensor(lr, dtype=param_group['lr'].dtype, "
                     "device=param_group['lr'].device)\n"
                     "            param_group['lr'] = lr\n")


def module_only_restores_the_scheduler(source: str) -> str:
    """EleutherAI's DeeperSpeed load (deepspeed/runtime/engine.py's ``_load_checkpoint`` at its tag v3.0, commit
    91d1c55, and main, 65d9f99, both version 0.16.5, read for issue #46): under ``load_module_only`` it restores
    the lr scheduler too, where ``load_lr_scheduler_states`` asks it, and still neither the optimizer nor
    global_steps. Upstream's (0.15.2, 0.19.8) restores only the module there. Written from that reading."""
    anchor = "        if load_module_only:\n            deepspeed_states = ['module']\n"
    assert source.count(anchor) == 1, "engine.py's _load_checkpoint has no load_module_only branch as 0.15.2's"
    return source.replace(anchor, anchor + "            if load_lr_scheduler_states and self.lr_scheduler is not None:"
                          "  # DeeperSpeed's\n"
                          "                self.lr_scheduler.load_state_dict(checkpoint['lr_scheduler'])\n")
