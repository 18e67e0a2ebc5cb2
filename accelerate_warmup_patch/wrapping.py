"""The list of what the patch wrapped: wrap, unwrap, and what is in place.

Each wrapper is listed with its original in ``STATE.wrapped`` (state.py, which also holds the switch ``mode``
that every wrapper reads, and the lock that guards the list). A target may hold other tools' wrappers above
and below ours: ours is found down the ``__wrapped__`` chain, one layer at most, and taken out of it alone. wrapt
is imported at the first ``wrap``, once deepspeed is imported (it costs ~50 ms): api.py arms and disarms without it.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from . import log, releases
from .state import STATE


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

    def current(self) -> bool:
        """True while the owner is still what its module exports (a reload makes new classes and functions
        that were never wrapped)."""
        if isinstance(self.owner, ModuleType):
            return sys.modules.get(self.owner.__name__) is self.owner
        module = sys.modules.get(self.owner.__module__)
        if "." in self.owner.__qualname__:
            return True
        return getattr(module, self.owner.__qualname__, None) is self.owner

    def layers(self) -> list[Any]:
        """What a caller reaches now, then what each layer wraps, down to the first that wraps nothing."""
        return _chain(_attribute(self.owner, self.name))

    def in_place(self) -> bool:
        """True while our wrapper is one of the layers a caller goes through: on top, or under another tool's."""
        return self.current() and any(layer is self.wrapper for layer in self.layers())


def deepspeed_version() -> str:
    """The running DeepSpeed's release: as its hook saw it, else as installed."""
    return STATE.deepspeed_version or releases.installed("deepspeed") or "0"


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


def _wrapper_class() -> type:
    """wrapt's FunctionWrapper with ``_Reference``'s pickling, made at the first wrap: importing wrapt costs ~50 ms."""
    if STATE.wrapper_class is None:
        import wrapt

        class _BoundFunctionWrapper(_Reference, wrapt.BoundFunctionWrapper):  # type: ignore[misc]
            __slots__ = ()

        class _FunctionWrapper(_Reference, wrapt.FunctionWrapper):  # type: ignore[misc]
            __slots__ = ("_self_owner",)  # the class whose method this wraps; None for a module's function
            __bound_function_wrapper__ = _BoundFunctionWrapper

            def __call__(self, *args: Any, **kwargs: Any) -> Any:
                # A method reached through its class and called with the instance first, as another tool's plain
                # wrapper above ours calls it: wrapt would pass no instance, so bind it as a method call does.
                # Calls through an instance never come here (they go through the bound wrapper).
                owner = self._self_owner
                if owner is not None and args and isinstance(args[0], owner):
                    return self.__get__(args[0], type(args[0]))(*args[1:], **kwargs)
                return super().__call__(*args, **kwargs)

        STATE.wrapper_class = _FunctionWrapper
    return STATE.wrapper_class


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


def _attribute(owner: Any, name: str) -> Any:
    """What ``owner.name`` holds now: a class's own attribute (the descriptor), a module's function."""
    return vars(owner).get(name) if isinstance(owner, type) else getattr(owner, name, None)


_DEEPEST = 64  # a chain of wrappers longer than this is not followed further (and a loop ends)


def _chain(top: Any) -> list[Any]:
    """``top``, what it wraps (``__wrapped__``, as wrapt's proxies and functools.wraps name it), and so on."""
    layers: list[Any] = []
    layer = top
    while layer is not None and len(layers) < _DEEPEST and not any(layer is seen for seen in layers):
        layers.append(layer)
        try:
            layer = getattr(layer, "__wrapped__", None)
        except Exception:  # another tool's object may raise anything from an attribute lookup
            layer = None
    return layers


def _ours(layer: Any) -> bool:
    """True for a wrapper this package made (type(), never a proxy's __class__; also after a reload of this module)."""
    kind = type(layer)
    return kind.__module__ == __name__ and kind.__qualname__.rpartition(".")[2] == "_FunctionWrapper"


def _is_proxy(layer: Any) -> bool:
    """A wrapt proxy (wrapt's own or a vendored copy, as ddtrace's): its ``__wrapped__`` is what it calls."""
    return any(kind.__name__ == "ObjectProxy" for kind in type(layer).__mro__)


def wrap(owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
    """Put ``wrapper`` (wrapt's signature) around ``owner.name``: one layer of ours however often apply() runs."""
    function_wrapper = _wrapper_class()  # wrapt is imported before the lock is taken: no import under it
    with STATE.lock:
        for wrapped in list(STATE.wrapped):
            if wrapped.owner is owner and wrapped.name == name:
                if wrapped.in_place():
                    return
                STATE.wrapped.remove(wrapped)  # reloaded, or taken out by another tool: wrap what is there now
        left = next((layer for layer in _chain(_attribute(owner, name)) if _ours(layer)), None)
        if left is not None:  # remove() had to leave it under another tool's wrapper: it serves again
            STATE.wrapped.append(_Wrapped(owner, name, left.__wrapped__, left))
            return
        original = _attribute(owner, name)
        # no `enabled=` callable: it costs a Python call per call; the wrappers read `STATE.mode`
        layer = function_wrapper(original, wrapper)
        layer._self_owner = owner if isinstance(owner, type) else None
        setattr(owner, name, layer)
        STATE.wrapped.append(_Wrapped(owner, name, original, layer))


def arguments_reader(method: Callable[..., Any], *,
                     defaults: bool) -> Callable[[Any, Any, Any], dict[str, Any]]:
    """For a wrapper of ``method``: the arguments a call gives it, by parameter name, from the wrapper's
    ``instance, args, kwargs`` (``defaults``: with the parameters not given at their defaults). The signature is
    read once, when the wrapper is made; a call whose arguments do not fit raises TypeError, as the call would."""
    import inspect  # when a wrapper is made, never on the start-up path

    signature = inspect.signature(method)

    def arguments(instance: Any, args: Any, kwargs: Any) -> dict[str, Any]:
        bound = signature.bind(instance, *args, **kwargs)
        if defaults:
            bound.apply_defaults()
        return bound.arguments

    return arguments


def is_wrapped(original: Any) -> bool:
    """True while ``original`` is listed as wrapped (remove() has not put it back)."""
    return any(w.original is original for w in STATE.wrapped)


def count() -> int:
    """How many wrappers are listed: a mark for ``unwrap_since``."""
    return len(STATE.wrapped)


def unwrap_since(mark: int) -> None:
    """Take out our layer of every target wrapped after the first ``mark`` listed, newest first."""
    with STATE.lock:
        while len(STATE.wrapped) > mark:
            _take_out(STATE.wrapped.pop())


def _take_out(wrapped: _Wrapped) -> None:
    """Our layer out of the chain wherever it sits; every other tool's layer, above or below it, stays working."""
    if not wrapped.current():
        return  # reloaded: the new owner never had our layer
    layers = wrapped.layers()
    if layers and layers[0] is wrapped.wrapper:
        setattr(wrapped.owner, wrapped.name, wrapped.wrapper.__wrapped__)
        return
    above = next((upper for upper, lower in zip(layers, layers[1:]) if lower is wrapped.wrapper), None)
    if above is None:
        log.info("%s: another tool had already taken this patch's layer out (it put back what the layer "
                 "wrapped); nothing of the patch is left there", wrapped.label)
    elif _is_proxy(above):
        # Another tool's wrapt layer calls its __wrapped__: pointing it at what ours wrapped takes ours out of the
        # chain, as that tool's own unwrapping of a layer under it would.
        above.__wrapped__ = wrapped.wrapper.__wrapped__
    else:  # a plain function that holds ours in its closure: nothing can take ours out from under it
        log.warn_once(f"held:{wrapped.label}", "%s: another tool's wrapper %r calls this patch's layer directly; the "
                      "layer stays under it and passes every call through unchanged", wrapped.label, above)


def unwrap_all() -> None:
    """Take our layer out of every target (one that another tool's plain wrapper holds stays, passing through)."""
    unwrap_since(0)


def in_place() -> list[str]:
    """The labels of the targets whose callers go through our layer now."""
    with STATE.lock:
        return [w.label for w in STATE.wrapped if w.in_place()]


def lost() -> list[str]:
    """The labels of the targets wrapped by this patch whose layer another tool has taken out since."""
    with STATE.lock:
        return [w.label for w in STATE.wrapped if w.current() and not w.in_place()]
