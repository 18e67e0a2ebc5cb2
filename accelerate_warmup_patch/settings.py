"""ACCELERATE_WARMUP_PATCH* parsing and validation, in one place (the mode, _STRICT, _RECORD).

On the start-up path of every process of an armed image: imports nothing but ``os`` and ``types`` (already
loaded by ``site``); ``logging`` is imported only to warn of a bad value.
"""

import os
from types import MappingProxyType

ENV_MODE = "ACCELERATE_WARMUP_PATCH"
ENV_STRICT = "ACCELERATE_WARMUP_PATCH_STRICT"
ENV_RECORD = "ACCELERATE_WARMUP_PATCH_RECORD"


class Mode:
    """The modes, as plain strings (an Enum would cost start-up time in every process)."""

    RESET = "reset"  # every release starts where the newest DeepSpeed starts
    STEP = "step"  # PyTorch convention: optimizer step k uses the schedule's lr(k)
    WARN = "warn"  # every lr as unpatched; one warning per scheduler that reset mode would change
    OFF = "off"  # nothing is patched


_ALIASES = MappingProxyType({
    **dict.fromkeys(("reset", "1", "true", "on", "yes", "enable", "enabled"), Mode.RESET),
    "step": Mode.STEP,
    "warn": Mode.WARN,
    **dict.fromkeys(("off", "0", "false", "no", "none", "disable", "disabled"), Mode.OFF),
})
ACCEPTED = ("reset (or 1, true, on, yes, enable, enabled), step, warn, off (or 0, false, no, none, disable, "
            "disabled)")
DEFAULT = Mode.RESET  # what an import arms when ACCELERATE_WARMUP_PATCH is unset or blank
# the one spelling rule of ACCELERATE_WARMUP_PATCH_STRICT; __init__.py, which may not import this module at
# start-up, spells the same tuple out
_TRUE = ("1", "true", "on", "yes", "enable", "enabled")
# ACCELERATE_WARMUP_PATCH_RECORD's spellings: the on and off words ACCELERATE_WARMUP_PATCH itself accepts
_RECORD = MappingProxyType({**dict.fromkeys(_TRUE, True),
                            **dict.fromkeys(("off", "0", "false", "no", "none", "disable", "disabled"), False)})
RECORD_ACCEPTED = "on (or 1, true, yes, enable, enabled), off (or 0, false, no, none, disable, disabled)"


class SettingsError(ValueError):
    """An ACCELERATE_WARMUP_PATCH* value is not one we accept (raised in strict mode only)."""


def strict() -> bool:
    """True when ACCELERATE_WARMUP_PATCH_STRICT asks for errors instead of warnings (0, false or blank: no)."""
    return os.environ.get(ENV_STRICT, "").strip().lower() in _TRUE


def lookup(value: str) -> "str | None":
    """The Mode a user's spelling stands for, or None when it is not one we accept; says nothing."""
    return _ALIASES.get(value.strip().lower())


def bad_value(source: str, value: str) -> str:
    """One line for a value we do not accept: what it is, what is accepted, what happens, how to fix it."""
    fix = "pass one of these" if source != ENV_MODE else f"set {ENV_MODE} to one of these"
    return f"{source}={value!r} is not one of: {ACCEPTED}; nothing is changed by it: {fix}"


def parse_mode(value: str, source: str) -> "str | None":
    """Turn a user's spelling into a Mode. A value we do not understand changes nothing: None, with one warning
    per process (strict mode raises SettingsError instead)."""
    mode = lookup(value)
    if mode is not None:
        return mode
    if strict():
        raise SettingsError(bad_value(source, value))
    from . import log  # loads logging: only a bad value pays for it

    # once per process: the environment is read more than once (and site.py runs a venv's .pth lines
    # twice, measured on Python 3.9 to 3.13, but the second run finds the package already imported)
    log.warn_once(f"settings:{source}={value!r}", "%s", bad_value(source, value))
    return None


def env_mode() -> "str | None":
    """The mode the environment asks for, or None when ACCELERATE_WARMUP_PATCH is unset or blank. A value we do
    not understand is ``off``: it may be a mistyped kill switch, and patching would change the job's numerics."""
    value = os.environ.get(ENV_MODE, "")
    if not value.strip():
        return None
    return parse_mode(value, ENV_MODE) or Mode.OFF


def resolve(requested: "str | None") -> "str | None":
    """The mode to run in: off in the environment wins, then the caller's, then the environment's; None when
    the caller asked for a mode we do not understand (nothing is to change)."""
    from_env = env_mode()
    if from_env == Mode.OFF:
        return Mode.OFF
    if requested is not None:
        return parse_mode(str(requested), "apply(mode=...)")
    return from_env or DEFAULT


def env_setting() -> "tuple[str | None, bool]":
    """ACCELERATE_WARMUP_PATCH as a new process takes it, read without ``env_mode()``'s warning or strict-mode
    error: the mode (None when unset or blank; off for a value not accepted, as a new process takes it) and
    whether the value is accepted (True when unset)."""
    value = os.environ.get(ENV_MODE, "")
    if not value.strip():
        return None, True
    mode = lookup(value)
    return (Mode.OFF if mode is None else mode), mode is not None


def record_wanted() -> bool:
    """Whether an armed job writes its record beside each checkpoint (ACCELERATE_WARMUP_PATCH_RECORD; docs/mark.md).

    Unset or blank: yes. ``off`` (or 0, false, ...): no. A value we do not accept keeps the record, with one warning
    per job (strict mode raises SettingsError instead): the record is what lets ``audit`` prove a run fixed,
    so a mistyped ``off`` must not leave a fixed run looking like an unpatched one."""
    value = os.environ.get(ENV_RECORD, "")
    if not value.strip():
        return True
    wanted = _RECORD.get(value.strip().lower())
    if wanted is not None:
        return wanted
    line = (f"{ENV_RECORD}={value!r} is not one of: {RECORD_ACCEPTED}; the record is still written beside each "
            f"checkpoint: set {ENV_RECORD} to one of these")
    if strict():
        raise SettingsError(line)
    from . import log  # loads logging: only a bad value pays for it

    log.warn_job_once(f"settings:{ENV_RECORD}={value!r}", "%s", line)  # said by rank 0, the rank that writes
    return True
