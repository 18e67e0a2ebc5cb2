"""Record 2 as data: how it writes an lr, how its step 0 and its chain are kept in shape, how it is checked.

Standard library only, and nothing here touches torch or DeepSpeed: the writer (``record_writer``, in the training job)
and the reader (``cli/audit/read``, on any Python) share these functions, so that both sides read the numbers the same
way (docs/mark.md). How a record is bound to its files is ``binding``'s.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from .binding import unbound
from .record_schema import TEXTS

RECORD_FILE = "accelerate_warmup_patch.json"
RECORD = 2  # the record this release writes; 1 was 0.5.0's (unbound)
PACKAGE = "accelerate-warmup-patch"
MAX_LOADS = 8  # the loads a record lists (newest first): the chain stays this short however often a run resumes
RECORD_BYTES = 64 * 1024  # the bound of a record read back (at a load, and by the audit)
# the temporary file of a record's atomic write: a name no reader of records matches (it does not end in .json),
# cleaned by the next write into that folder where a killed process left one
PARTIAL = re.compile(r"^\.accelerate_warmup_patch\.[0-9a-f]+\.partial$")

# What a record says about the run's step 0 (``step0.how``). Only "observed" can clear a run; every other is a
# reason the audit names.
OBSERVED = "observed"  # a patched process saw its optimizer run step 0 (its first step, the run started there)
NO_STEP_YET = "no-step-yet"  # the run has taken no optimizer step
UNRECORDED = "unrecorded"  # step 0 ran in a process that left no record bound to the save this one loaded
UNBOUND = "unbound"  # the save this one loaded held a record that could not be bound to it (it claims, not proves)
RECORD_1 = "record-1"  # the save this one loaded held a record 1 (0.5.0): unbound, so a claim
UNOBSERVED = "unobserved"  # the run started in a patched process that could not watch its first step
HOWS = (OBSERVED, NO_STEP_YET, UNRECORDED, UNBOUND, RECORD_1, UNOBSERVED)
# What the patch did to this process's scheduler when it was built (``scheduler.step0``; record_writer.py writes
# them, the audit reads them). "unknown" is read too.
FIXED = "fixed"  # changed its build-time behaviour (reset), or stepped it once before the first step (step)
WARNED = "warned"  # warn mode: reset would have changed it, and nothing was changed
AS_RELEASE = "as-release"  # fresh when seen, and the release already starts it as the reference does
EARLIER_PROCESS = "earlier-process"  # had stepped, or was restored, when seen: step 0 ran in an earlier process
LEFT = "left"  # the patch could not decide, or failed, and left it as the release made it
UNKNOWN = "unknown"  # not one of DeepSpeed's schedulers, or the patch never saw it
SCHEDULER_STEP0S = (FIXED, WARNED, AS_RELEASE, EARLIER_PROCESS, LEFT, UNKNOWN)


# Numbers ----------------------------------------------------------------------------------------------------

def encode_lr(value: float) -> float | str:
    """An lr as JSON holds it: a finite float as itself, NaN and infinities as "nan", "inf", "-inf"."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return float(value)


def decode_lr(value: Any) -> float | None:
    """An lr a record holds, as a float (NaN and infinities from their strings); None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def decode_lrs(value: Any, cap: int = 10_000) -> list[float] | None:
    """A list of lrs a record holds; None when it is not a list of lrs (or is longer than ``cap``)."""
    if not isinstance(value, list) or len(value) > cap:
        return None
    decoded = [decode_lr(v) for v in value]
    return None if any(v is None for v in decoded) else [v for v in decoded if v is not None]


def same_lr(a: float, b: float) -> bool:
    """Two lrs the same: equal to float32's precision (a tensor lr), NaN equal to NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-15)


def same_lrs(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(same_lr(x, y) for x, y in zip(a, b))


# The shape a record is written in, for what is read back ----------------------------------------------------
# A job hands on the step0 and loads of the record it resumed from into every record it writes later; the audit reads
# them. Both rebuild them here, key by key, to the shape record_writer.py writes: only these keys, each a bounded
# scalar or a list of lrs, so that nothing read back (an lr of 1e999, a value nested 900 deep, a huge string)
# reaches a later record or makes it unwritable.

STEP0_KEYS = ("how", "deepspeed", "scheduler", "mode", "patch", "patch_did", "tag", "claimed", "why",
              "torch_scheduler", "global_steps", "lrs", "expected")
_STEP0_TEXTS = STEP0_KEYS[:-3]  # all but the step count and the lrs
HOP_KEYS = ("tag", "deepspeed", "global_steps", "scheduler", "record", "bound")
_TEXT = 200  # a name, a release, a tag
_WHY = 1000  # a sentence


def parse(data: bytes) -> Any:
    """A record's bytes as JSON: NaN and Infinity literals refused (a record writes non-finite lrs as strings),
    integers past 30 digits read as null (``int()`` of a long one is quadratic on Python 3.9)."""
    return json.loads(data.decode("utf-8"), parse_int=_bounded_int, parse_constant=_refuse_constant)


def _bounded_int(text: str) -> int | None:
    return int(text) if len(text) <= 30 else None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON (a record writes a non-finite lr as a string)")


def scheduler_type(config: Any) -> str | None:
    """The scheduler class a ds_config names (``scheduler.type``), cut at 200 characters; None where it names none."""
    block = config.get("scheduler") if isinstance(config, dict) else None
    kind = block.get("type") if isinstance(block, dict) else None
    return kind[:_TEXT] if isinstance(kind, str) else None


def step_count(value: Any) -> int | None:
    """A step count a record holds (an int from 0 to 2**63 - 1, not a bool); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value.bit_length() > 63:
        return None
    return int(value)


def scalar(value: Any, cap: int = _TEXT) -> str | int | bool | None:
    """A plain scalar of a record: a string cut at ``cap`` characters, a bool, a step count; anything else None."""
    if isinstance(value, str):
        return value[:cap]
    if isinstance(value, bool):
        return value
    return step_count(value)


def written_step0(step0: Any) -> dict[str, Any]:
    """``step0`` rebuilt in the shape a record writes it, its lrs encoded; raises ValueError where it cannot be one
    (an unknown ``how``; an observed one without its release, step count and one lr per group)."""
    if not isinstance(step0, dict) or step0.get("how") not in HOWS:
        raise ValueError(f"step0.how is not one of {', '.join(HOWS)}")
    shaped: dict[str, Any] = {key: scalar(step0[key], _WHY if key == "why" else _TEXT)
                              for key in _STEP0_TEXTS if key in step0}
    if step0.get("global_steps") is not None:
        shaped["global_steps"] = step_count(step0["global_steps"])
        if shaped["global_steps"] is None:
            raise ValueError("step0.global_steps is not a step count")
    for key in ("lrs", "expected"):
        if step0.get(key) is not None:
            lrs = decode_lrs(step0[key])
            if lrs is None:
                raise ValueError(f'step0.{key} is not a list of lrs (numbers, or "nan", "inf", "-inf")')
            shaped[key] = [encode_lr(lr) for lr in lrs]
        elif key in step0:
            shaped[key] = None
    if shaped["how"] == OBSERVED:
        if not isinstance(shaped.get("deepspeed"), str) or shaped.get("global_steps") is None:
            raise ValueError("an observed step0 must name its deepspeed and global_steps")
        lrs, expected = shaped.get("lrs"), shaped.get("expected")
        if not lrs or (expected is not None and len(expected) != len(lrs)):
            raise ValueError("step0.lrs must hold one lr per group, and step0.expected as many or be null")
    return shaped


def written_loads(loads: Any) -> list[dict[str, Any]]:
    """``loads`` rebuilt in the shape a record writes it (at most MAX_LOADS hops of plain scalars); raises
    ValueError where it is not a list of objects."""
    if not isinstance(loads, list) or not all(isinstance(hop, dict) for hop in loads):
        raise ValueError("loads is not a list of objects")
    return [{key: scalar(hop[key]) for key in HOP_KEYS if key in hop} for hop in loads[:MAX_LOADS]]


# The record as written: never past what a reader accepts ------------------------------------------------------

def fitted(record: dict[str, Any]) -> str:
    """The record as the text written, at most RECORD_BYTES, so that the job's load and the audit always read it.
    A model with many param groups lists each group's lr up to five times; where the indented text would pass the
    bound, it is written compactly, then without what only informs (the scheduler's lrs before and after the
    patch, this process's first step where step0 holds the run's), then with step 0 as ``unobserved``, saying why:
    never a proof the reader cannot check, never a claim it would refuse. Raises ValueError where even that passes
    (not reachable by a record's own fields: texts and loads are bounded)."""
    too_many = (f"the record of {_groups(record)} param groups' lrs would pass the {RECORD_BYTES} bytes a reader "
                "accepts: left out")
    for shaped, indent in ((record, 1), (record, None), (_informative_out(record, too_many), None),
                           (_step0_out(_informative_out(record, too_many), too_many), None)):
        text = json.dumps(shaped, indent=indent, separators=None if indent else (",", ":"), allow_nan=False) + "\n"
        if len(text.encode("utf-8")) <= RECORD_BYTES:
            return text
    raise ValueError(f"the record passes {RECORD_BYTES} bytes even without its lrs")


def _part(record: dict[str, Any], key: str) -> dict[str, Any]:
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def _groups(record: dict[str, Any]) -> int:
    lists: tuple[Any, ...] = (_part(record, "step0").get("lrs"), _part(record, "first_step").get("lrs"), [])
    return max(len(lrs) for lrs in lists if isinstance(lrs, list))


def _informative_out(record: dict[str, Any], why: str) -> dict[str, Any]:
    """Without the scheduler's lrs before and after, and this process's first-step lrs (step0 keeps the run's)."""
    shaped = dict(record)
    if isinstance(record.get("scheduler"), dict):
        shaped["scheduler"] = {**record["scheduler"], "lrs_before": None, "lrs_after": None,
                               "why": f"{record['scheduler'].get('why') or ''} ({why})"[:_WHY]}
    first = record.get("first_step")
    if isinstance(first, dict) and first.get("observed"):
        shaped["first_step"] = {"observed": False, "why": f"its lrs: {why} (step0 holds the run's step 0)"}
    return shaped


def _step0_out(record: dict[str, Any], why: str) -> dict[str, Any]:
    """Step 0 as ``unobserved``, saying why: no proof, and nothing the reader refuses."""
    step0 = _part(record, "step0")
    kept = {key: step0[key] for key in ("deepspeed", "scheduler", "mode", "patch") if key in step0}
    return {**record, "step0": {"how": UNOBSERVED, **kept, "why": f"step 0's lrs: {why}"}}


# The record as read back --------------------------------------------------------------------------------

def is_record_1(record: dict[str, Any]) -> bool:
    """Whether a record, as valid_record returns it, is a record 1 (0.5.0's, bound to no file): the one way the job
    and the audit recognise one, after the one check of a record (a ``"record": true`` or a record 1 of another
    shape is no record at all)."""
    return bool(record["record"] == 1)


def valid_record(raw: Any) -> dict[str, Any]:
    """Record 1 or 2 with every field of the right type, its lrs decoded: the one check of a record, by the job
    before it hands on a loaded record's step0 and loads, and by the audit; raises ValueError naming the first field
    that is not (a value nested too deep to write as text among them)."""
    try:
        return _valid_record(raw)
    except (RecursionError, TypeError, KeyError) as error:
        raise ValueError(f"not a record's shape ({type(error).__name__})") from None


def _valid_record(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("record") not in (1, RECORD) or \
            isinstance(raw.get("record"), bool):
        raise ValueError(f"record {raw.get('record') if isinstance(raw, dict) else None!r}, not 1 or 2")
    if raw.get("package") != PACKAGE:
        raise ValueError("not accelerate-warmup-patch's")
    record: dict[str, Any] = {key: raw.get(key) for key in ("record", *TEXTS)}
    if not all(isinstance(record[key], str) for key in TEXTS):
        raise ValueError(f"{', '.join(TEXTS[:-1])} and {TEXTS[-1]} must be strings")
    record["global_steps"] = _count(raw.get("global_steps"), "global_steps")
    record["scheduler"] = _valid_scheduler(raw.get("scheduler"))
    if record["record"] == RECORD:
        record["bound_to"] = _valid_binding(raw.get("bound_to"))
        record["first_step"] = _valid_first_step(raw.get("first_step"))
        record["step0"] = _valid_step0(raw.get("step0"))
        record["loads"] = [{key: hop.get(key) for key in ("tag", "deepspeed", "global_steps", "record", "bound")}
                           for hop in written_loads(raw.get("loads"))]
    return record


def _count(value: Any, name: str) -> int:
    count = step_count(value)
    if count is None:
        raise ValueError(f"{name} is not a step count")
    return count


def _lrs(value: Any, name: str, optional: bool = True) -> list[float] | None:
    if value is None and optional:
        return None
    lrs = decode_lrs(value)
    if lrs is None:
        raise ValueError(f"{name} is not a list of lrs (numbers, or \"nan\", \"inf\", \"-inf\")")
    return lrs


def _valid_scheduler(scheduler: Any) -> dict[str, Any] | None:
    if scheduler is None:
        return None
    if not isinstance(scheduler, dict) or scheduler.get("step0") not in SCHEDULER_STEP0S:
        raise ValueError(f"scheduler.step0 is not one of {', '.join(SCHEDULER_STEP0S)}")
    if not isinstance(scheduler.get("class"), str):
        raise ValueError("scheduler.class is not a string")
    return {"class": scheduler["class"][:200], "step0": scheduler["step0"],
            "lrs_before": _lrs(scheduler.get("lrs_before"), "scheduler.lrs_before"),
            "lrs_after": _lrs(scheduler.get("lrs_after"), "scheduler.lrs_after"),
            "why": str(scheduler.get("why") or "")[:1000]}


def _valid_binding(bound_to: Any) -> dict[str, Any]:
    if not isinstance(bound_to, dict):
        raise ValueError("bound_to is not an object")
    if bound_to.get("file") is None:
        return unbound(str(bound_to.get("unbound") or "no reason given")[:1000])
    if not isinstance(bound_to.get("file"), str) or not isinstance(bound_to.get("digest"), str):
        raise ValueError("bound_to.file and bound_to.digest must be strings")
    valid = {"file": bound_to["file"][:200], "size": _count(bound_to.get("size"), "bound_to.size"),
             "members": _count(bound_to.get("members"), "bound_to.members"), "digest": bound_to["digest"][:100]}
    others = bound_to.get("others")
    if others is not None:  # absent from 0.6.0's records
        if not isinstance(others, dict) or not isinstance(others.get("digest"), str):
            raise ValueError("bound_to.others is not an object with a digest")
        valid["others"] = {"files": _count(others.get("files"), "bound_to.others.files"),
                           "digest": others["digest"][:100]}
    return valid


def _valid_first_step(first: Any) -> dict[str, Any] | None:
    if first is None:
        return None
    if not isinstance(first, dict) or not isinstance(first.get("observed"), bool):
        raise ValueError("first_step is not an object with observed true or false")
    if not first["observed"]:
        return {"observed": False, "why": str(first.get("why") or "")[:1000]}
    return {"observed": True, "lrs": _lrs(first.get("lrs"), "first_step.lrs", optional=False),
            "global_steps": _count(first.get("global_steps"), "first_step.global_steps")}


def _valid_step0(step0: Any) -> dict[str, Any]:
    """The run's step 0 as the record tells it (record_data's ``how``s), in the shape a record writes it and as the
    job that resumes from it hands it on (written_step0), every key present and the lrs decoded."""
    shaped = written_step0(step0)
    valid = {key: shaped.get(key) for key in STEP0_KEYS}
    valid["why"] = str(valid["why"] or "")
    for key in ("lrs", "expected"):
        valid[key] = _lrs(valid[key], f"step0.{key}")
    return valid
