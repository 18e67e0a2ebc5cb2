"""The record of what the patch wrapped, and the switch every wrapper reads.

``mode`` is the switch: None while nothing is armed (every wrapper then calls the original alone), else
the armed mode; ``api.apply`` and ``api.remove`` set it. ``state`` is the record of this process: each
wrapper with its original (``wrap``, ``unwrap_since``, ``in_place``), the DeepSpeed release wrapped, and
what the patch changed. wrapt is imported at the first ``wrap``, once deepspeed or accelerate is
imported (it costs ~50 ms): api.py reads and sets the switch without it.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from . import log, releases

# the switch: None while nothing is armed; the wrappers read it on every call
mode: str | None = None


@dataclass
class _Wrapped:
    owner: Any  # a module or a class
    name: str
    original: Any
    wrapper: Any

    @property
    def label(self) -> str:
        """``deepspeed.initialize``, ``deepspeed.runtime.engine.DeepSpeedEngine.load_checkpoint``."""
        if isinstance(self.owner, ModuleType):
            return f"{self.owner.__name__}.{self.name}"
        return f"{self.owner.__module__}.{self.owner.__qualname__}.{self.name}"

    def in_place(self) -> bool:
        """True while the wrapper is what a caller reaches: the owner holds it, and the owner is still what
        its module exports (a reload makes new classes and functions that were never wrapped)."""
        if isinstance(self.owner, ModuleType):
            return sys.modules.get(self.owner.__name__) is self.owner and \
                getattr(self.owner, self.name, None) is self.wrapper
        module = sys.modules.get(self.owner.__module__)
        current_owner = getattr(module, self.owner.__qualname__, None) if "." not in self.owner.__qualname__ \
            else self.owner
        return current_owner is self.owner and vars(self.owner).get(self.name) is self.wrapper


@dataclass
class _State:
    wrapped: list[_Wrapped] = field(default_factory=list)
    deepspeed_version: str | None = None  # as deepspeed's hook saw it
    fixes: int = 0
    not_fixed: list[str] = field(default_factory=list)  # one line per scheduler the patch had to leave wrong


state = _State()


def deepspeed_version() -> str:
    """The running DeepSpeed's release: as its hook saw it, else as installed."""
    return state.deepspeed_version or releases.installed("deepspeed") or "0"


class _Reference:
    """What a wrapper adds to wrapt's: it pickles, copies and deep-copies as the function it wraps.

    wrapt's proxies refuse all three (``object proxy must define __reduce__()``, wrapt 1.14.1 to 2.x). A
    function pickles by its module and qualified name, a bound method by its instance and name: unpickled,
    the name is looked up again, so a process without the patch gets the original and one with it the
    wrapper. A function copies as itself; a bound method deep-copies as one bound to a copy of its instance.
    """

    __slots__ = ()

    def __reduce_ex__(self, protocol: Any) -> Any:
        return _by_reference(self)

    def __reduce__(self) -> Any:
        return _by_reference(self)

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: Any) -> Any:
        instance = _bound_to(self)
        return self if instance is None else getattr(copy.deepcopy(instance, memo), _bound_name(self))


_function_wrapper: type | None = None


def _wrapper_class() -> type:
    """wrapt's FunctionWrapper with ``_Reference``'s pickling, made at the first wrap: importing wrapt costs ~50 ms."""
    global _function_wrapper
    if _function_wrapper is None:
        import wrapt

        class _BoundFunctionWrapper(_Reference, wrapt.BoundFunctionWrapper):  # type: ignore[misc]
            __slots__ = ()

        class _FunctionWrapper(_Reference, wrapt.FunctionWrapper):  # type: ignore[misc]
            __slots__ = ()
            __bound_function_wrapper__ = _BoundFunctionWrapper

        _function_wrapper = _FunctionWrapper
    return _function_wrapper


def _bound_to(wrapper: Any) -> Any:
    """The instance (or class) a wrapped method is bound to; None for a function or an unbound method."""
    instance = getattr(wrapper.__wrapped__, "__self__", None)
    return None if isinstance(instance, ModuleType) else instance


def _bound_name(wrapper: Any) -> str:
    return str(wrapper.__wrapped__.__name__)


def _by_reference(wrapper: Any) -> Any:
    """pickle's answer for the wrapped callable, as it pickles the original (``save_global``)."""
    instance = _bound_to(wrapper)
    if instance is not None:
        return getattr, (instance, _bound_name(wrapper))
    owner_path, _, name = wrapper.__qualname__.rpartition(".")
    if not owner_path:  # a module's function: pickle checks that the module holds this very object
        return wrapper.__qualname__
    try:
        owner: Any = sys.modules[wrapper.__module__]
        for part in owner_path.split("."):
            owner = getattr(owner, part)
    except (KeyError, AttributeError) as error:
        import pickle

        raise pickle.PicklingError(f"Can't pickle {wrapper!r}: {wrapper.__qualname__} is not found in "
                                   f"{wrapper.__module__}") from error
    # a method reached through its class is a new bound wrapper at each lookup: by its class and name
    return getattr, (owner, name)


def wrap(owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
    """Put ``wrapper`` (wrapt's signature) around ``owner.name``, once however often apply() runs."""
    for wrapped in list(state.wrapped):
        if wrapped.owner is owner and wrapped.name == name:
            if wrapped.in_place():
                return
            state.wrapped.remove(wrapped)  # stale (the owner was reloaded): wrap what is there now
    original = vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)
    # no `enabled=` callable: it costs a Python call per call; the wrappers read `mode`
    function_wrapper = _wrapper_class()(original, wrapper)
    setattr(owner, name, function_wrapper)
    state.wrapped.append(_Wrapped(owner, name, original, function_wrapper))


def is_wrapped(original: Any) -> bool:
    """True while ``original`` is recorded as wrapped (remove() has not put it back)."""
    return any(w.original is original for w in state.wrapped)


def count() -> int:
    """How many wrappers are recorded: a mark for ``unwrap_since``."""
    return len(state.wrapped)


def unwrap_since(mark: int) -> None:
    """Put back every original wrapped after the first ``mark`` records, newest first."""
    while len(state.wrapped) > mark:
        wrapped = state.wrapped.pop()
        if wrapped.in_place():
            setattr(wrapped.owner, wrapped.name, wrapped.original)
        elif vars(wrapped.owner).get(wrapped.name) is not None and isinstance(wrapped.owner, type):
            log.warn_once(f"stacked:{wrapped.label}", "%s was wrapped again after this patch; leaving that "
                          "wrapper in place with this patch disabled", wrapped.label)


def unwrap_all() -> None:
    """Put every original back; a wrapper someone stacked on ours stays, disabled (``mode`` is None)."""
    unwrap_since(0)


def in_place() -> list[str]:
    """The labels of the wrappers that callers reach now."""
    return [w.label for w in state.wrapped if w.in_place()]
