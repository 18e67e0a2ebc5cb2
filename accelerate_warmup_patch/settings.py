"""ACCELERATE_WARMUP_PATCH* parsing and validation, in one place.

On the start-up path of every process of an armed image: imports nothing but ``os`` (already
loaded by ``site``); ``logging`` is imported only to warn of a bad value.
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


class SettingsError(ValueError):
    """An ACCELERATE_WARMUP_PATCH* value is not one we accept (raised in strict mode only)."""


def _truthy(value: "str | None") -> bool:
    return (value or "").strip().lower() in ("1", "true", "on", "yes")


def strict() -> bool:
    """True when ACCELERATE_WARMUP_PATCH_STRICT asks for errors instead of warnings."""
    return _truthy(os.environ.get(ENV_STRICT))


def lookup(value: str) -> "str | None":
    """The Mode a user's spelling stands for, or None when it is not one we accept; says nothing."""
    return _ALIASES.get(value.strip().lower())


def bad_value(source: str, value: str) -> str:
    """One line for a value we do not accept: what it is, what is accepted, how to fix it."""
    fix = "pass one of these" if source != ENV_MODE else f"set {ENV_MODE} to one of these"
    return (f"{source}={value!r} is not one of: {ACCEPTED}; {fix}, or unset {ENV_STRICT} "
            f"to run in {DEFAULT} mode with a warning")


def parse_mode(value: str, source: str) -> str:
    """Turn a user's spelling into a Mode; an unknown one warns once (raises in strict mode)."""
    mode = lookup(value)
    if mode is not None:
        return mode
    if strict():
        raise SettingsError(bad_value(source, value))
    from . import log  # loads logging: only a bad value pays for it

    # once per process: the environment is read more than once (and site.py runs a venv's .pth lines
    # twice, measured on Python 3.9 to 3.13, but the second run finds the package already imported)
    log.warn_once(f"settings:{source}={value!r}", "%s=%r is not one of: %s; using %r", source, value, ACCEPTED,
                  DEFAULT)
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


def env_setting() -> "tuple[str | None, bool]":
    """ACCELERATE_WARMUP_PATCH as a new process takes it, read without ``env_mode()``'s warning or strict-mode
    error: the mode (None when unset or blank; the default for a value not accepted, as a new process falls
    back to it) and whether the value is accepted (True when unset)."""
    value = os.environ.get(ENV_MODE, "")
    if not value.strip():
        return None, True
    mode = lookup(value)
    return (DEFAULT if mode is None else mode), mode is not None
