"""The ``sitecustomize.py`` of a DeepSpeed build that tests/builds.py makes (copied into the build's folder).

With that folder first on ``PYTHONPATH``, every interpreter started there runs the build: its modules
(``deepspeed.runtime.lr_schedules`` and ``deepspeed.git_version_info_installed``, and ``deepspeed.runtime.engine``
where the build changes it) are loaded from the folder, every other one from the installed release, and the
folder's ``deepspeed-<version>.dist-info`` is what the package metadata says is installed (doctor reads it).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_FOLDER = Path(__file__).resolve().parent
_MODULES = {"deepspeed.runtime.lr_schedules": ("deepspeed", "runtime", "lr_schedules.py"),
            "deepspeed.git_version_info_installed": ("deepspeed", "git_version_info_installed.py"),
            "deepspeed.runtime.engine": ("deepspeed", "runtime", "engine.py")}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: ModuleType | None = None) -> \
            importlib.machinery.ModuleSpec | None:
        parts = _MODULES.get(name)
        if parts is None or not _FOLDER.joinpath(*parts).is_file():
            return None
        return importlib.util.spec_from_file_location(name, _FOLDER.joinpath(*parts))


sys.meta_path.insert(0, _Finder())
