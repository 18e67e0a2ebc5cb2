"""accelerate-warmup-patch's ``sitecustomize`` for a prefix install on ``PYTHONPATH`` (an environment module, whose
modulefile puts this file's folder first on ``PYTHONPATH``: docs/deploy.md).

Python reads ``.pth`` files only in site folders, never in a ``PYTHONPATH`` folder, so the package's own ``.pth`` line
is not read from a prefix install. ``site.py`` imports the first ``sitecustomize`` on ``sys.path``, which is this
file: it does what the ``.pth`` line does (import the package, which arms itself, when ``ACCELERATE_WARMUP_PATCH`` is
set; import nothing when it is not, so ``module unload`` disarms), then runs the ``sitecustomize`` it hides (the
Python's own, Debian's, or a user's), so that nothing of theirs is lost. Neither happens under ``python -S`` (no
``site.py``); ``python -E`` and ``-I`` ignore ``PYTHONPATH``, so the prefix is not on their path at all.

Every Python a module's user starts reads this file, a Python 2.7 or a 3.6 among them. So it is written in the
syntax they all parse (type comments, no annotations, no f-strings), and on a Python the package does not support
it arms nothing and says nothing: a job of such a Python runs as it always did, without an error line at each start.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORTED = sys.version_info >= (3, 9)  # the package's requires-python


def _dependencies_last():  # type: () -> None
    """PREFIX/deps (wrapt) after every folder the job already has: a job's own wrapt stays the one it imports, and a
    job without one finds the prefix's. PYTHONPATH would put it first, shadowing the job's."""
    deps = os.path.join(os.path.dirname(HERE), "deps")
    if os.path.isdir(deps) and deps not in sys.path:
        sys.path.append(deps)


def _arm():  # type: () -> None
    # the .pth line's test: a dict lookup when the variable is unset
    if os.environ.get("ACCELERATE_WARMUP_PATCH", "").strip():
        import accelerate_warmup_patch  # noqa: F401  (its import arms it, in the variable's mode)


def _run_the_hidden_one():  # type: () -> None
    """Run the next ``sitecustomize`` on ``sys.path`` after this file's folder, as site.py would have."""
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != HERE]
    if sys.version_info < (3, 5):  # noqa: UP036  (Python 2.7 reads this file too: imp finds and runs it)
        import imp

        try:
            found = imp.find_module("sitecustomize", rest)
        except ImportError:
            return
        try:
            imp.load_module("_hidden_sitecustomize", *found)
        finally:
            if found[0] is not None:
                found[0].close()
        return
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


try:
    if SUPPORTED:
        _dependencies_last()
        _arm()
finally:  # whatever arming did (strict mode may raise), the hidden sitecustomize still runs
    _run_the_hidden_one()
