"""The scan of a pickle before anything is built from it: its opcodes walked against BOUNDS, so that a hostile or
broken pickle costs seconds and tens of MB at most, and names the bound it passes.

The bounds are checked on the pickle's bytes alone (opcodes, objects built, stack depth, memo indices, distinct
globals, digits of a number in text); the skim gives the same verdict for a small pickle at a fraction of the
cost. ``checkpoint_pickle`` reads a file's data only after this scan passed. Standard library only.
"""

from __future__ import annotations

import functools
import pickletools
import re
from typing import Any

from ...torch_file import MIB, Unreadable

# The bounds. A real model-states pickle holds ~25 opcodes and ~10 objects per tensor and ~100 bytes per tensor
# (the tensors' data is in other zip members), so these leave room for a few hundred thousand tensors.
BOUNDS = {
    "pickle_bytes": 32 * MIB,  # data.pkl (declared and real), or the legacy format's leading pickles together
    "opcodes": 4_000_000,
    "objects": 2_000_000,  # opcodes that build a new object
    "stack": 1_000_000,  # the unpickler's stack and marks
    "memo": 4_000_000,  # the highest memo index (the C unpickler allocates an array that long)
    "globals": 10_000,  # distinct names (one stand-in class each)
    "digits": 4_300,  # a number written in text (int() of a long one is quadratic on Python 3.9)
    "depth": 64,  # nesting of a value the audit uses (plain)
    "values": 100_000,  # values in one value the audit uses (plain)
}
_MARK = pickletools.markobject


class EndsEarly(Unreadable):
    """The data ends inside a pickle: damaged, or cut where the audit stopped reading (the legacy format's bound)."""


# The scan before the load ---------------------------------------------------------------------------------

# what the scan needs of an opcode, from pickletools' own description of each
_PLAIN, _FIXED, _LINE, _NUMBER, _PAIR, _COUNTED = range(6)
_MEMO_PUT, _MEMOIZE, _NAMED, _STACK_NAMED, _MARK_OP, _STOP = range(1, 7)
_COUNTS = {pickletools.TAKEN_FROM_ARGUMENT1: (1, False), pickletools.TAKEN_FROM_ARGUMENT4: (4, True),
           pickletools.TAKEN_FROM_ARGUMENT4U: (4, False), pickletools.TAKEN_FROM_ARGUMENT8U: (8, False)}


def _table() -> list[tuple[Any, ...] | None]:
    """Per opcode byte: how its argument is read (kind, width, signed), the stack items it pops (or the index of
    the mark it pops to) and pushes, whether it builds a new object, and what else the scan tracks of it."""
    table: list[tuple[Any, ...] | None] = [None] * 256
    reuse = {"DUP", "GET", "BINGET", "LONG_BINGET", "MARK", "NONE", "NEWTRUE", "NEWFALSE", "MEMOIZE",
             "READONLY_BUFFER"}
    special = {"PUT": _MEMO_PUT, "BINPUT": _MEMO_PUT, "LONG_BINPUT": _MEMO_PUT, "MEMOIZE": _MEMOIZE,
               "GLOBAL": _NAMED, "INST": _NAMED, "STACK_GLOBAL": _STACK_NAMED, "MARK": _MARK_OP, "STOP": _STOP}
    for op in pickletools.opcodes:
        arg = op.arg
        width, signed = 0, False
        if arg is None:
            kind = _PLAIN
        elif arg.n == pickletools.UP_TO_NEWLINE:
            kind = _PAIR if arg.name == "stringnl_noescape_pair" else \
                _NUMBER if arg.name in ("decimalnl_short", "decimalnl_long", "floatnl") else _LINE
        elif arg.n in _COUNTS:
            kind = _COUNTED
            width, signed = _COUNTS[arg.n]
        else:
            kind, width = _FIXED, arg.n
        before, after = list(op.stack_before), list(op.stack_after)
        to_mark = before.index(_MARK) if _MARK in before else -1
        table[op.code.encode("latin-1")[0]] = (
            op.name, kind, width, signed, len(before), to_mark, len(after), bool(after) and op.name not in reuse,
            special.get(op.name, 0))
    return table


_OPCODES = _table()


# The skim: the scan's verdict for a small pickle at a fraction of its cost ------------------------------------
#
# Every opcode is at least a byte, and none pushes more than one item, so a pickle of N bytes has at most N
# opcodes, builds at most N objects and never stacks more than N items: under the smallest of those three bounds,
# its size alone keeps them. What is left to check is what a few bytes can ask for: a memo index (the C
# unpickler allocates an array that long), a number written in digits, and the distinct globals. The skim
# walks the opcodes with one regular expression that takes only opcodes that keep those bounds (a memo index
# under _SKIM_MEMO, at most _SKIM_DIGITS digits), reading lengths and names itself; at anything else (a bound
# passed, damage, an opcode it does not take) it gives up and the full scan decides, with its own words.
_SKIM_MEMO = 0x3CFFFF  # LONG_BINPUT's index with its top byte 0 and the next at most 0x3C; PUT's with 6 digits
_SKIM_DIGITS = 4300


@functools.lru_cache(maxsize=1)  # compiled at the first skim (tens of ms), not at import
def _skim_pattern() -> re.Pattern[bytes]:
    plain: list[int] = []
    numbers: list[int] = []
    lines: list[int] = []
    fixed: dict[int, list[int]] = {}
    for code, entry in enumerate(_OPCODES):
        if entry is None:
            continue
        name, kind, width = entry[0], entry[1], entry[2]
        if name in ("STOP", "STACK_GLOBAL", "LONG_BINPUT", "PUT"):
            continue  # the end, a global to count, memo indices to bound (below)
        if kind == _PLAIN:
            plain.append(code)
        elif kind == _FIXED:
            fixed.setdefault(width, []).append(code)
        elif kind == _NUMBER:
            numbers.append(code)
        elif kind == _LINE:
            lines.append(code)

    def among(codes: list[int]) -> bytes:
        return b"[" + b"".join(re.escape(bytes([c])) for c in codes) + b"]"

    choices = [among(plain)] + [among(codes) + b".{%d}" % width for width, codes in sorted(fixed.items())]
    # protocol 2 (torch's) writes every str as BINUNICODE with a 4-byte length; the short ones taken here
    lengths = b"|".join(re.escape(bytes([n])) + b"\\x00\\x00\\x00" + b".{%d}" % n for n in range(256))
    choices += [b"X(?:" + lengths + b")", rb"r..[\x00-\x3c]\x00", rb"p[0-9]{1,6}\n",
                among(numbers) + rb"[^\n]{0,%d}\n" % (_SKIM_DIGITS + 1), among(lines) + rb"[^\n]*\n"]
    return re.compile(b"(?:" + b"|".join(choices) + b")*", re.DOTALL)


def _skim(data: bytes, start: int) -> int | None:
    """Where the pickle at ``start`` ends, if the skim can tell that it keeps BOUNDS; None to leave it to scan."""
    limits = BOUNDS
    if len(data) - start > min(limits["opcodes"], limits["objects"], limits["stack"]) or \
            limits["memo"] < _SKIM_MEMO or limits["digits"] < _SKIM_DIGITS:
        return None
    end, table, match = len(data), _OPCODES, _skim_pattern().match
    names: set[bytes] = set()
    stacked = 0
    pos = start
    while True:
        pos = match(data, pos).end()  # type: ignore[union-attr]  # "(...)*" matches everywhere
        if pos >= end:
            return None
        entry = table[data[pos]]
        if entry is None:
            return None
        name, kind, width, signed = entry[0], entry[1], entry[2], entry[3]
        pos += 1
        if name == "STOP":
            return pos
        if kind == _COUNTED:
            length = int.from_bytes(data[pos:pos + width], "little", signed=signed)
            pos += width + length
            if length < 0 or pos > end:
                return None
        elif kind == _PAIR:  # GLOBAL, INST: module and name, a line each
            stop = data.find(b"\n", data.find(b"\n", pos) + 1)
            if stop < 0 or pos > stop:
                return None
            names.add(data[pos:stop])
            pos = stop + 1
        elif name == "STACK_GLOBAL":
            stacked += 1  # the names come from the stack: each counts as new, as in scan
        else:
            return None
        if len(names) + stacked > limits["globals"]:
            return None


def scan(data: bytes, start: int = 0) -> int:
    """Check one pickle in ``data`` from ``start`` against BOUNDS without building anything; returns where it ends.

    Raises Unreadable naming the bound it passes, or what is damaged. A small pickle is skimmed (``_skim``);
    the rest, and whatever the skim leaves, is walked opcode by opcode, about a microsecond each."""
    skimmed = _skim(data, start)
    return skimmed if skimmed is not None else full_scan(data, start)


def full_scan(data: bytes, start: int) -> int:
    """``scan`` opcode by opcode, whatever the pickle's size: the verdict with its own words."""
    end = len(data)
    limits = BOUNDS
    max_opcodes, max_objects, max_stack = limits["opcodes"], limits["objects"], limits["stack"]
    max_memo, max_globals, digits = limits["memo"], limits["globals"], limits["digits"]
    table = _OPCODES
    pos, opcodes, objects, depth, memo = start, 0, 0, 0, 0
    marks: list[int] = []
    names: set[bytes] = set()
    try:
        while True:
            code = data[pos]
            pos += 1
            entry = table[code]
            if entry is None:
                raise Unreadable(f"its pickle is damaged (an unknown opcode {code:#04x} at byte {pos - 1})")
            name, kind, width, signed, pops, to_mark, pushes, builds, special = entry
            opcodes += 1
            value = b""
            if kind == _FIXED:
                if pos + width > end:
                    raise IndexError
                value = data[pos:pos + width]
                pos += width
            elif kind == _COUNTED:
                length = int.from_bytes(data[pos:pos + width], "little", signed=signed)
                pos += width
                if length < 0 or pos + length > end:
                    raise IndexError
                pos += length
            elif kind == _NUMBER:
                stop = data.find(b"\n", pos, pos + digits + 2)
                if stop < 0:
                    if data.find(b"\n", pos) < 0:
                        raise IndexError
                    raise Unreadable(f"its pickle writes a number of more than {digits} digits (a bound of the "
                                     "audit): not read")
                value = data[pos:stop]
                pos = stop + 1
            elif kind != _PLAIN:  # one line, or two for GLOBAL and INST
                stop = data.find(b"\n", pos)
                if kind == _PAIR and stop >= 0:
                    stop = data.find(b"\n", stop + 1)
                if stop < 0:
                    raise IndexError
                value = data[pos:stop]
                pos = stop + 1
            if special:
                if special in (_MEMO_PUT, _MEMOIZE):
                    index = memo if special == _MEMOIZE else _memo_index(name, value)
                    if index > max_memo:
                        raise Unreadable(f"its pickle uses memo index {index}, past {max_memo} (a bound of the "
                                         "audit): not read")
                    memo = max(memo, index + 1)
                elif special in (_NAMED, _STACK_NAMED):
                    names.add(value if special == _NAMED else b"%d" % opcodes)  # a STACK_GLOBAL counts as new
                    if len(names) > max_globals:
                        raise Unreadable(f"its pickle names more than {max_globals} globals (a bound of the "
                                         "audit): not read")
            if to_mark >= 0:
                depth = marks.pop() - to_mark
            else:
                depth -= pops
            if depth < 0:
                raise Unreadable("its pickle is damaged (an opcode pops more than the stack holds)")
            if special == _MARK_OP:
                marks.append(depth)
            else:
                depth += pushes
            if special == _STOP:
                return pos
            if builds:
                objects += 1
                if objects > max_objects:
                    raise Unreadable(f"its pickle builds more than {max_objects} objects (a bound of the audit): "
                                     "not read")
            if opcodes > max_opcodes:
                raise Unreadable(f"its pickle has more than {max_opcodes} opcodes (a bound of the audit): not read")
            if depth + len(marks) > max_stack:
                raise Unreadable(f"its pickle's stack grows past {max_stack} items (a bound of the audit): "
                                 "not read")
    except IndexError:  # data[pos] past the end, or marks.pop() with no mark
        raise EndsEarly("its pickle is damaged (it ends early, or an opcode needs a mark that is not there)") \
            from None


def _memo_index(name: str, value: bytes) -> int:
    if name == "PUT":
        try:
            return int(value.strip())
        except ValueError:
            raise Unreadable("its pickle is damaged (a PUT without its index)") from None
    return int.from_bytes(value, "little")
