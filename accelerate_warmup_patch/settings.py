"""ACCELERATE_WARMUP_PATCH* parsing and validation, in one place.

On the start-up path of every process of an armed image: imports nothing but ``os`` (already
loaded by ``site``); ``logging`` is imported only to warn.
"""

import os

ENV_MODE = "ACCELERATE_WARMUP_PATCH"
ENV_STRICT = "ACCELERATE_WARMUP_PATCH_STRICT"


class Mode:
    """The modes, as plain strings (an Enum would cost start-up time in every process)."""

    RESET = "reset"  # every release starts where the newest DeepSpeed starts
    STEP = "step"  # PyTorch convention: optimizer step k uses the schedule's lr(k)
    OFF = "off"  # nothing is patched


_ALIASES: "dict[str, str]" = {
    "reset": Mode.RESET, "1": Mode.RESET, "true": Mode.RESET, "on": Mode.RESET,
    "step": Mode.STEP,
    "off": Mode.OFF, "0": Mode.OFF, "false": Mode.OFF,
}
ACCEPTED = "reset (or 1, true, on), step, off (or 0, false)"
DEFAULT = Mode.RESET
_warned: "set[tuple[str, str]]" = set()


class SettingsError(ValueError):
    """An ACCELERATE_WARMUP_PATCH* value is not one we accept (raised in strict mode only)."""


def _truthy(value: "str | None") -> bool:
    return (value or "").strip().lower() in ("1", "true", "on", "yes")


def strict() -> bool:
    """True when ACCELERATE_WARMUP_PATCH_STRICT asks for errors instead of warnings."""
    return _truthy(os.environ.get(ENV_STRICT))


def parse_mode(value: str, source: str) -> str:
    """Turn a user's spelling into a Mode; an unknown one warns once (raises in strict mode)."""
    mode = _ALIASES.get(value.strip().lower())
    if mode is not None:
        return mode
    message = f"{source}={value!r} is not one of: {ACCEPTED}"
    if strict():
        raise SettingsError(message)
    if (source, value) not in _warned:  # the environment is read more than once per process
        _warned.add((source, value))
        import logging

        logging.getLogger("accelerate_warmup_patch").warning("%s; using %r", message, DEFAULT)
    return DEFAULT


def env_mode() -> "str | None":
    """The mode the environment asks for, or None when ACCELERATE_WARMUP_PATCH is unset or empty."""
    value = os.environ.get(ENV_MODE, "")
    if not value.strip():
        return None
    return parse_mode(value, ENV_MODE)


def resolve(requested: "str | None") -> str:
    """The mode to run in: off in the environment wins, then the caller's, then the environment's."""
    from_env = env_mode()
    if from_env == Mode.OFF:
        return Mode.OFF
    if requested is not None:
        return parse_mode(str(requested), "apply(mode=...)")
    return from_env or DEFAULT
