"""The house rules, as tests over the package's source: no room over 400 lines; a reserved word of the house names
one thing; a DeepSpeed release's number is written in the guard table's rooms alone; doctor and status ask
``installed`` and ``upstream`` what a build lacks, never work it out again.

What they read: every ``.py`` file of the package, ``accelerate_warmup_patch/`` (each a *room*, named by its path in
the package: ``cli/doctor.py``). tests/ and benchmarks/ are not rooms of the package, and no rule here reads them.
Each file is parsed with ``ast``, never imported; standard library only.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "accelerate_warmup_patch"


def rooms() -> dict[str, Path]:
    """Every room of the package by its path in the package (``cli/audit/judge.py``)."""
    return {path.relative_to(PACKAGE).as_posix(): path for path in sorted(PACKAGE.rglob("*.py"))}


def in_rooms(room: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``room`` is one of ``patterns`` (fnmatch: ``cli/audit/*``)."""
    return any(fnmatch.fnmatchcase(room, pattern) for pattern in patterns)


def test_the_rules_read_the_whole_package() -> None:
    found = rooms()
    assert {"__init__.py", "releases.py", "cli/doctor.py", "cli/audit/judge.py", "upstream/pr6597.py"} <= set(found)
    assert len(found) >= 60, sorted(found)


# No room over 400 lines ---------------------------------------------------------------------------------------------

MOST_LINES = 400
# The one room still over MOST_LINES, and the only one that may be: the record's format and binding are being
# rewritten on another branch (#53 item 2). The lead removes this entry when record_data.py is split by job.
PENDING_SPLIT: frozenset[str] = frozenset()


def lines(path: Path) -> int:
    """A room's lines: every line of the file (code, docstrings, comments and blank lines alike), as
    ``str.splitlines`` counts them, which is ``wc -l``'s count for a file that ends in a newline."""
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_room_of_the_package_is_over_400_lines() -> None:
    over = {room: lines(path) for room, path in rooms().items() if lines(path) > MOST_LINES}
    assert {room: count for room, count in over.items() if room not in PENDING_SPLIT} == {}, \
        "split the room by job: each new room named after its job, with its row in docs/how-it-works.md"


def test_the_pending_split_is_still_pending() -> None:
    # an exception that no longer applies goes, so that no other room can hide behind it
    assert {room: lines(rooms()[room]) for room in PENDING_SPLIT if lines(rooms()[room]) <= MOST_LINES} == {}


# Reserved words: one meaning each -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reserved:
    """A word of the house that names one thing: the rooms where names of that word may be made (a definition:
    a function, class, argument, variable or attribute set, a room's own file name), and the word's forms."""

    meaning: str
    rooms: tuple[str, ...]  # fnmatch patterns of rooms
    forms: tuple[str, ...]


# the guard table's rooms: every fact about a release is written here, or in its unit of upstream/
TABLE_ROOMS = ("releases.py", "multinode_runners.py", "vendor_builds.py", "wrapped_targets.py", "upstream/*")

RESERVED: dict[str, Reserved] = {
    "watch": Reserved("the first-step watch: the one-shot optimizer step pre-hook that sees the lr step 0 ran at "
                      "(step_watch.py; state.py keeps each engine's)", ("step_watch.py", "state.py"),
                      ("watch", "watches", "watched", "watching", "watcher", "watchers")),
    "store": Reserved("where the audit reads a run's files: the local disk or an fsspec URL (cli/audit/stores.py)",
                      ("cli/audit/*",), ("store", "stores", "stored")),
    "fact": Reserved("a row of the guard table (releases.Fact) and what the table says", (
        *TABLE_ROOMS, "installed.py", "launcher.py", "cli/config_facts.py", "cli/doctor.py", "cli/doctor_*.py",
        "cli/audit/judge.py"), ("fact", "facts")),
    "carry": Reserved("the multi-node launcher's export of the switch to every node (launcher.carry, CARRIED; "
                      "a runner that carries it; doctor's multinode section)",
                      ("launcher.py", "multinode_runners.py", "cli/doctor.py"),
                      ("carry", "carries", "carried", "carrier", "carriers", "carrying")),
    "newest": Reserved("a run's newest save (the audit; its report's newest_step0 fields keep their output keys), or "
                       "the newest release the table was read at (NEWEST_DEEPSPEED, NEWEST_ACCELERATE); never the "
                       "reference release", ("cli/audit/*", "releases.py", "targets.py"), ("newest",)),
    "record": Reserved("the record a patched run writes beside each checkpoint (record_writer.py, record_data.py)",
                       ("record_data.py", "record_schema.py", "binding.py", "record_writer.py", "loaded_record.py",
                        "own_writes.py", "step_watch.py", "nets.py", "settings.py", "cli/audit/*"),
                       ("record", "records", "recorded", "recorder", "recording", "unrecorded")),
    "probe": Reserved("the probe: the installed build's scheduler classes run once on a scratch optimizer, and what "
                      "it saw (probe.py, scratch.py, installed.Probed, a unit's check; doctor's of a build)",
                      ("probe.py", "scratch.py", "installed.py", "state.py", "targets.py", "api.py", "upstream/*",
                       "cli/probe_build.py", "cli/probe_cache.py", "cli/doctor.py", "cli/doctor_states.py",
                       "cli/status_report.py"),
                      ("probe", "probes", "probed", "probing")),
}

# Second meanings still to rename: none since own_writes.SaveNotes (#53 item 2). (room, word): the names
PENDING_RENAMES: dict[tuple[str, str], str] = {}


def words(name: str) -> list[str]:
    """The words of a name, lower case: ``_newest_step0_from_table`` -> newest, step, 0, from, table;
    ``FsspecStore`` -> fsspec, store."""
    found = []
    for piece in name.split("_"):
        found += [word.lower() for word in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", piece)]
    return found


def defined(path: Path) -> list[tuple[int, str]]:
    """The names a room makes, with their lines: functions, classes, arguments, names and attributes assigned,
    aliases, caught exceptions, and the room's own file name (line 0)."""
    found = [(0, path.stem)]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((node.lineno, node.name))
        elif isinstance(node, ast.arg):
            found.append((node.lineno, node.arg))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.alias) and node.asname:
            found.append((node.lineno, node.asname))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.append((node.lineno, node.name))
    return found


def second_meanings() -> dict[tuple[str, str], list[str]]:
    """(room, word) -> the names of a reserved word made outside its rooms."""
    found: dict[tuple[str, str], list[str]] = {}
    for room, path in rooms().items():
        for line, name in defined(path):
            for word, reserved in RESERVED.items():
                if set(words(name)) & set(reserved.forms) and not in_rooms(room, reserved.rooms):
                    found.setdefault((room, word), []).append(f"{name} (line {line})")
    return found


def test_a_reserved_word_names_its_one_thing_alone() -> None:
    found = {key: sorted(set(names)) for key, names in second_meanings().items() if key not in PENDING_RENAMES}
    assert found == {}, "a second meaning of a reserved word: rename it (or, for the same thing, list the room)"


def test_each_pending_rename_is_still_pending() -> None:
    assert sorted(set(PENDING_RENAMES) - set(second_meanings())) == []


def test_the_words_of_a_name_are_found_in_every_spelling(tmp_path: Path) -> None:
    assert words("_newest_step0_from_table") == ["newest", "step", "0", "from", "table"]
    assert words("FsspecStore") == ["fsspec", "store"] and words("SEEN_BY_THE_PROBE") == ["seen", "by", "the", "probe"]
    assert "fact" not in words("default_factory") and "store" not in words("restore")
    room = tmp_path / "watch_room.py"
    room.write_text("class Recorder:\n    def carry(self, store):\n        self.newest_fact = [r for r in ()]\n"
                    "        try:\n            pass\n        except OSError as probed:\n            pass\n",
                    encoding="utf-8")
    assert {name for _, name in defined(room)} >= {"watch_room", "Recorder", "carry", "store", "newest_fact", "probed"}


# A release's number: in the guard table's rooms alone --------------------------------------------------------------

# a DeepSpeed release's number, as a string spells it (every release the table knows is 0.x.y: "0.15.3",
# "v0.19.8"); not a part of a longer dotted number (127.0.0.1)
RELEASE_NUMBER = re.compile(r"(?<![\w.])v?(0\.\d+\.\d+)(?![\w.]*\d)")


def _own_releases() -> set[str]:
    """This package's own releases (CHANGELOG.md's headings): a record's version, an older audit's."""
    return set(re.findall(r"^## (?:Unreleased \()?(\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.M))


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def release_numbers(path: Path) -> list[str]:
    """The DeepSpeed release numbers a room writes: in its strings (an f-string's text too), and as a tuple of
    ints ``(0, 15, 3)``. Allowed, with reasons: a docstring (it cites where a fact was read, "@ v0.15.2", or explains a
    case; the code acts on and says only the table's facts); a comment (not a literal); a number of one of this
    package's own releases that the string does not call DeepSpeed's ("a record 1 (0.5.0)")."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings, own, found = _docstrings(tree), _own_releases(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            for match in RELEASE_NUMBER.finditer(node.value):
                deepspeeds = node.value[:match.start()].rstrip().endswith(("DeepSpeed", "deepspeed", "@"))
                if match.group(1) not in own or deepspeeds:
                    found.append(f"line {node.lineno}: {node.value[max(0, match.start() - 40):match.end() + 20]!r}")
        elif isinstance(node, ast.Tuple) and _release_tuple(node):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _release_tuple(node: ast.Tuple) -> bool:
    """``(0, 15, 3)``: three ints, the first 0, as ``releases.parse`` gives a release."""
    ints = [e.value for e in node.elts if isinstance(e, ast.Constant) and type(e.value) is int]
    return len(ints) == len(node.elts) == 3 and ints[0] == 0


def test_a_release_number_is_written_in_the_guard_tables_rooms_alone() -> None:
    spelled = {room: release_numbers(path) for room, path in rooms().items() if not in_rooms(room, TABLE_ROOMS)}
    assert {room: numbers for room, numbers in spelled.items() if numbers} == {}, \
        "a fact about a release belongs in the guard table (releases.py and its rooms) or its upstream unit"


def test_the_release_number_finder_finds_what_it_is_meant_to(tmp_path: Path) -> None:
    room = tmp_path / "room.py"
    room.write_text('"""Read @ v0.15.2."""\nA = "DeepSpeed 0.19.3 and newer"\nB = f"on v0.12.6 {A}"\n'
                    'C = parse(x) < (0, 15, 3)\nD = "127.0.0.1, 3.11.2"\nE = "a record 1 (0.5.0)"\n'
                    'F = "DeepSpeed 0.5.0"\n', encoding="utf-8")
    assert sorted(line.split(":")[0] for line in release_numbers(room)) == ["line 2", "line 3", "line 4", "line 7"]


def test_the_guard_tables_rooms_are_files_of_the_package() -> None:
    assert all(any(in_rooms(room, (pattern,)) for room in rooms()) for pattern in TABLE_ROOMS)


# doctor and status ask installed and upstream; they derive nothing of them again ---------------------------------

# the command line's rooms that report what the installed build does
REPORTING = ("cli/doctor.py", "cli/doctor_*.py", "cli/arming.py", "cli/status_report.py")
# what they may ask of the upstream changes: lookups, each answering for a release, a class or a change as a whole,
# and a unit's own facts (``pr8126.RELEASE``). What a build lacks is installed.lacks's to say (the probe's answer,
# this process's or a child's, else the table's); the changes' list, their keys and the class each changed are what
# it is made of
UPSTREAM_LOOKUPS = frozenset({"verdicts", "never_affected", "START", "first_release", "fixed_release", "Change",
                              "unclaimed_for"})
UNIT = re.compile(r"pr\d+")
# what they may not read of the guard table: its raw rows and a version number's parts (the table's lookups compare)
TABLE_INSIDES = frozenset({"row", "rows", "parse", "SCHEDULER_STARTS", "WARMUP_MAX_LR_DEFAULTS", "WARMUP_LENGTHS",
                           "OPTIMIZER_STEPS", "INHERITS"})


def _asked(path: Path, module: str) -> set[str]:
    """The names a room reads of the package's module ``module`` (``upstream.lacks`` -> lacks; ``from ..upstream
    import START`` -> START), and the submodules of it it imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
             and isinstance(node.value, ast.Name) and node.value.id == module}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and (node.module or "").split(".")[0] == module:
            found |= {alias.name for alias in node.names} | set((node.module or "").split(".")[1:])
    return found


def test_doctor_and_status_ask_installed_and_upstream_never_rederive_them() -> None:
    reporting = {room: path for room, path in rooms().items() if in_rooms(room, REPORTING)}
    assert {"cli/doctor.py", "cli/status_report.py"} <= set(reporting)
    derived = {room: sorted(name for name in _asked(path, "upstream") - UPSTREAM_LOOKUPS if not UNIT.fullmatch(name))
               + sorted(_asked(path, "releases") & TABLE_INSIDES) for room, path in reporting.items()}
    assert {room: names for room, names in derived.items() if names} == {}, \
        "ask installed (what the build lacks, its verdicts) or a lookup of upstream or releases"


def test_the_guard_sees_a_rederivation(tmp_path: Path) -> None:
    room = tmp_path / "room.py"
    room.write_text("from .. import releases, upstream\nowner = upstream.carrier(key, name)\n"
                    "number = releases.parse(v)\nfrom ..upstream import unit\n", encoding="utf-8")
    assert _asked(room, "upstream") - UPSTREAM_LOOKUPS == {"carrier", "unit"}
    assert _asked(room, "releases") & TABLE_INSIDES == {"parse"}


@pytest.mark.parametrize("word", sorted(RESERVED))
def test_each_reserved_word_has_a_room(word: str) -> None:
    assert any(in_rooms(room, RESERVED[word].rooms) for room in rooms()), word
