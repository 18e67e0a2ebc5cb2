"""The docs, checked like code: every relative link resolves, every command line the README shows exists, and
every ACCELERATE_WARMUP_PATCH* variable the docs name is one settings.py reads.

Standard library only: the CLI's parser is built (``cli.main._parser()``) and asked for each command's ``--help``;
no command runs.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import quickstart  # the README's shell lines (tests/quickstart.py: standard library only)
from test_house import TABLE_ROOMS, in_rooms, rooms  # the package's rooms, and the guard table's

from accelerate_warmup_patch import settings
from accelerate_warmup_patch.cli import main
from accelerate_warmup_patch.cli.audit.verdicts import VERDICTS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted([README, ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
COMMAND = re.compile(r"(?<![\w/.-])(?:accelerate-warmup-patch|python3? -m accelerate_warmup_patch)\s+(\w+)"
                     r"((?:\s+[^\s|;&#]+)*)")
BARE_COMMAND = re.compile(r"^(doctor|status|demo|audit)((?:\s+[^\s|;&#]+)*)$")
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
VARIABLE = re.compile(r"\bACCELERATE_WARMUP_PATCH\w*")


def _prose(text: str) -> str:
    """``text`` without its fenced blocks and code spans: where a markdown link can be."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _code(text: str) -> list[str]:
    """Each line of every fenced block (its comments dropped) and every code span of ``text``."""
    pieces = []
    for block in FENCE.finditer(text):
        pieces += [line.split("  #")[0] for line in block.group(0).splitlines()[1:-1]]
    pieces += [span.group(2) for span in CODE_SPAN.finditer(FENCE.sub("", text))]
    return pieces


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation out, each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a link may name in ``page``: its headings' (a repeated one gets -1, -2, ...) and explicit ones."""
    text = page.read_text(encoding="utf-8")
    found: set[str] = set(HTML_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    """The relative links of ``page`` (not a URL, not mailto)."""
    targets = LINK.findall(_prose(page.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


def commands(text: str) -> list[tuple[str, list[str]]]:
    """Each ``accelerate-warmup-patch COMMAND ...`` the text's code shows (or a code span that starts with a command's
    name, as ``doctor --config``), with the flags written after it."""
    found = []
    for piece in _code(text):
        for match in COMMAND.finditer(piece):
            found.append((match.group(1), FLAG.findall(match.group(2))))
        bare = BARE_COMMAND.match(piece.strip())
        if bare:
            found.append((bare.group(1), FLAG.findall(bare.group(2))))
    return found


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = main._parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _in_help(flag: str, parser: argparse.ArgumentParser) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", parser.format_help()) is not None


# Links -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_and_its_anchor(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {file.relative_to(ROOT)}")
    assert broken == [], broken


def test_the_link_checker_sees_links_and_only_links() -> None:
    text = "See [a](docs/a.md#b), ![p](x.png \"t\") and [u](https://x.y). `[no](c.md)`\n```sh\n[no](d.md)\n```\n"
    assert LINK.findall(_prose(text)) == ["docs/a.md#b", "x.png", "https://x.y"]
    assert slug("`audit`: were finished runs hurt?") == "audit-were-finished-runs-hurt"
    assert slug("How each wrapper acts, per release (decided by `releases.py`)") == \
        "how-each-wrapper-acts-per-release-decided-by-releasespy"


# Commands --------------------------------------------------------------------------------------------------------

def test_the_readme_shows_every_command_and_the_checker_finds_them() -> None:
    shown = {name for name, _ in commands(README.read_text(encoding="utf-8"))}
    assert shown == set(_subcommands()), shown


def test_every_flag_the_readme_shows_is_in_its_commands_help() -> None:
    subcommands = _subcommands()
    missing = []
    for name, flags in commands(README.read_text(encoding="utf-8")):
        assert name in subcommands, f"accelerate-warmup-patch {name}: no such command"
        missing += [f"{name} {flag}" for flag in flags
                    if not _in_help(flag, subcommands[name])]
    assert missing == [], missing


def test_every_flag_the_readme_shows_alone_is_some_commands() -> None:
    # a code span such as `--live` or `--lr 1e-3`, in a sentence about a command
    subcommands = _subcommands()
    alone = {FLAG.findall(piece)[0] for piece in _code(README.read_text(encoding="utf-8"))
             if piece.strip().startswith("--")}
    assert alone, "the README shows no flag alone: the check reads nothing"
    missing = [flag for flag in sorted(alone)
               if not any(_in_help(flag, sub) for sub in subcommands.values())]
    assert missing == [], missing


def test_the_command_checker_reads_sh_lines_and_code_spans() -> None:
    text = ("Run `doctor --config FILE` or `RUN accelerate-warmup-patch doctor --strict`.\n```sh\n"
            "accelerate-warmup-patch audit --json /runs | jq .   # not --jobs\n"
            "python -m accelerate_warmup_patch demo -v\n```\n")
    assert sorted(commands(text)) == [("audit", ["--json"]), ("demo", ["-v"]), ("doctor", ["--config"]),
                                      ("doctor", ["--strict"])]


def test_every_extra_the_readme_names_is_in_pyproject() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^(\w[\w-]*)\s*=", section, re.M))
    named = {m for piece in _code(README.read_text(encoding="utf-8")) for m in re.findall(r"\[(\w[\w-]*)\]", piece)}
    assert named - extras == set(), named


# Environment variables ---------------------------------------------------------------------------------------

def test_every_variable_the_docs_name_is_one_settings_reads() -> None:
    known = {value for name, value in vars(settings).items() if name.startswith("ENV_")}
    assert {"ACCELERATE_WARMUP_PATCH", "ACCELERATE_WARMUP_PATCH_STRICT", "ACCELERATE_WARMUP_PATCH_RECORD"} <= known
    unknown = {f"{page.relative_to(ROOT)}: {name}" for page in PAGES
               for name in VARIABLE.findall(page.read_text(encoding="utf-8")) if name not in known}
    assert unknown == set(), unknown


def test_the_readme_names_every_variable_settings_reads() -> None:
    known = {value for name, value in vars(settings).items() if name.startswith("ENV_")}
    assert known <= set(VARIABLE.findall(README.read_text(encoding="utf-8")))


# The audit's verdicts ------------------------------------------------------------------------------------------

def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_verdicts_are_the_same_in_the_readme_the_help_the_docs_and_the_code() -> None:
    assert len(VERDICTS) == 5 and "skipped" in VERDICTS
    assert ", ".join(f"`{v}`" for v in VERDICTS) in _words(README.read_text(encoding="utf-8"))
    assert f"a verdict: {', '.join(VERDICTS)} " in _words(_subcommands()["audit"].format_help())
    page = (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    section = page.split("## Verdicts and exit status", 1)[1].split("\n## ", 1)[0]
    assert tuple(re.findall(r"^\| `([a-z ]+)` \|", section, re.M)) == VERDICTS


# Every shell line of the README --------------------------------------------------------------------------------

# the lines no parser here can check, each run as written by the test named (a line's start -> file::test)
INSTALL_LINES = "tests/test_deploy.py::test_the_readmes_install_lines_install_the_wheel_and_an_extra_and_remove_it"
MODULE_LINES = ("tests/test_deploy.py::"
                "test_each_module_system_keeps_the_users_value_switches_warn_to_reset_and_checks_the_jobs_venv")
RUN_AS_WRITTEN = {
    "python3 -m pip wheel ": "tests/admin_steps.py::wheel",
    "python3 -m pip install dist/": INSTALL_LINES,
    'python3 -m pip install "dist/': INSTALL_LINES,
    "python3 -m pip uninstall ": INSTALL_LINES,
    "deploy/install-prefix.sh ": "tests/test_deploy.py::prefix",
    "module use ": MODULE_LINES,
    "module load ": MODULE_LINES,
    "module switch ": MODULE_LINES,
    "module unload ": MODULE_LINES,
    "sbatch deploy/audit-array.sbatch ":
        "tests/test_audit_array.py::test_a_cancelled_array_task_keeps_its_closing_line_and_summary_at_every_moment",
    "python3 -m pip install -q nox": ".ci/run",  # the same install, then noxfile.py's CI_SESSIONS, the demo among them
    "bash .ci/run": ".ci/run",  # CI's entry point itself
}
LAUNCHERS = ("torchrun", "accelerate", "deepspeed", "srun")  # tests/test_quickstart.py's RUN_BY names each line's test
SHELL = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "16"}  # what an array task's shell holds


def _array_audit_line() -> str:
    """deploy/audit-array.sbatch's audit command, its continuation lines joined, without its ``exec``."""
    script = (ROOT / "deploy" / "audit-array.sbatch").read_text(encoding="utf-8").replace("\\\n", " ")
    (line,) = [x for x in script.splitlines() if x.startswith("exec ")]
    return " ".join(line.removeprefix("exec ").split())


def _parsed(line: str) -> argparse.Namespace:
    """An ``accelerate-warmup-patch`` line as the shell hands it over (its variables given values, its redirection
    dropped), parsed by the command's own parser: a usage error is SystemExit."""
    words = shlex.split(re.sub(r"\$(\w+)", lambda m: SHELL[str(m.group(1))], line))
    words = words[:next((i for i, word in enumerate(words) if word.startswith(">")), len(words))]
    return main._parser().parse_args(words[1:])


def _accepted(name: str, value: str) -> bool:
    if name == settings.ENV_MODE:
        return settings.lookup(value) is not None
    return name == settings.ENV_RECORD and value in re.findall(r"\w+", settings.RECORD_ACCEPTED)


def test_every_shell_line_of_the_readme_is_parsed_checked_or_run_by_a_test() -> None:
    unchecked = []
    for line in quickstart.lines():
        if line.startswith("accelerate-warmup-patch "):
            assert _parsed(line).command in _subcommands(), line
        elif line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            assert _accepted(name, value), line
        elif line.split()[0] in LAUNCHERS:
            assert f'"{line}":' in (ROOT / "tests" / "test_quickstart.py").read_text(encoding="utf-8"), line
        else:
            runner = next((test for start, test in RUN_AS_WRITTEN.items() if line.startswith(start)), None)
            if runner is None:
                unchecked.append(line)
                continue
            file, _, name = runner.partition("::")
            text = (ROOT / file).read_text(encoding="utf-8")
            if name:
                assert f"def {name}(" in text, runner
            else:  # .ci/run: the line itself, or the install .ci/run does before the sessions
                assert line == f"bash {file}" or line.split(" && ")[0] in text, line
    assert unchecked == [], unchecked


def test_the_readmes_demo_session_is_one_that_ci_runs() -> None:
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    assert "nox -s demo" in quickstart.line("python3 -m pip install -q nox") and '"demo"' in noxfile
    assert re.search(r"CI_SESSIONS = \[.*?\"demo\"", noxfile, re.S)


def test_the_audit_lines_parse_into_what_they_say() -> None:
    # the array script's audit: its line as the shell hands it over (its PATHs, "$@", those sbatch was given)
    shard = _parsed(_array_audit_line().replace('"$@"', "/runs"))
    assert shard.shard == (3, 16) and shard.jsonl and shard.exclude == ["wandb"] and shard.paths == ["/runs"]
    merged = _parsed(quickstart.line("accelerate-warmup-patch audit --summarize"))
    assert merged.summarize and merged.paths == ["part-*.jsonl"]


def test_the_readmes_newest_row_is_the_newest_releases_recorded_run() -> None:
    # the demo's own rows of the installed release are tests/test_cli.py's (on 0.15.2); the newest release's row is
    # tests/golden.json's run of the demo's schedule (the harness's WarmupLR-linear: 0 -> 1e-3 over 5 steps), which
    # tests/test_core.py holds to a live run of that release
    golden = json.loads((ROOT / "tests" / "golden.json").read_text(encoding="utf-8"))
    name = f"DeepSpeed {golden['deepspeed']} (newest), unpatched or patched"
    row = next(line for line in README.read_text(encoding="utf-8").splitlines() if line.startswith(f"| {name} |"))
    lrs = [[float(cell.strip().strip("*"))] for cell in row.strip("|").split("|")[1:5]]
    assert lrs == golden["runs"]["deepspeed:WarmupLR-linear:g0.001:ga1:z0"][:4], row


# docs/how-it-works.md's map: a row per file of the package, and at most 25 house words -------------------------

HOW_IT_WORKS = ROOT / "docs" / "how-it-works.md"


def _section(title: str) -> str:
    text = HOW_IT_WORKS.read_text()
    start = text.index(f"\n## {title}\n")
    return text[start:text.index("\n## ", start + 1)]


def test_the_module_table_has_a_row_for_every_file_of_the_package_and_no_other() -> None:
    package = ROOT / "accelerate_warmup_patch"
    files = {str(path.relative_to(package)) for path in package.rglob("*.py")}
    rows = re.findall(r"^\| `([^`]+\.py)` \|", _section("The modules"), re.M)
    assert len(rows) == len(set(rows)), rows
    assert sorted(files - set(rows)) == [], "a file without its row"
    assert sorted(set(rows) - files) == [], "a row without its file"


def glossary_terms(section: str) -> list[str]:
    """Each term a glossary defines: every bold word in a bullet's head, before its first colon (``**shard** /
    **part**:`` is two terms, ``**binding** (`bound_to`):`` one)."""
    heads = re.findall(r"^- (.+?):", section, re.M)
    return [term for head in heads for term in re.findall(r"\*\*(.+?)\*\*", head)]


def test_the_glossary_holds_at_most_25_terms() -> None:
    terms = glossary_terms(_section("Words"))
    assert len(terms) == len(set(terms)), terms
    assert 0 < len(terms) <= 25, terms


def test_the_glossary_counts_a_bullet_of_two_terms_as_two() -> None:
    section = "- **shard** / **part**: one slice, its file.\n- **binding** (`bound_to`): ties: **not** this.\n"
    assert glossary_terms(section) == ["shard", "part", "binding"]


PACKAGE = ROOT / "accelerate_warmup_patch"


def _module(path: Path) -> str:
    """A file of the package as the imports column names it: ``cli/audit/judge.py`` -> ``cli.audit.judge``,
    ``upstream/__init__.py`` -> ``upstream``."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def _imported(path: Path, source: str | None = None) -> set[Path]:
    """Every file of the package ``path`` imports, lazily or not: relative imports and absolute ones
    (``import accelerate_warmup_patch``, ``from accelerate_warmup_patch.cli import main``); a name imported from a
    package that is no module of it (``from .. import __version__``) is an import of that package's ``__init__.py``.
    ``source``: other text, read as if it were ``path``'s (the self-test's)."""
    import ast

    here = list(path.parent.relative_to(PACKAGE).parts)
    found: set[Path] = set()

    def add(parts: list[str]) -> None:
        where = PACKAGE.joinpath(*parts)
        module = where / "__init__.py" if where.is_dir() else where.with_suffix(".py")
        if module.is_file():
            found.add(module)

    def ours(dotted: str) -> list[str] | None:
        names = dotted.split(".")
        return names[1:] if names[0] == PACKAGE.name else None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8") if source is None else source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = ours(alias.name)
                if parts is not None:
                    add(parts)
        elif isinstance(node, ast.ImportFrom):
            base = (here[:len(here) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                    if node.level else ours(node.module or ""))
            if base is None:
                continue
            for alias in node.names:
                sub = PACKAGE.joinpath(*base, alias.name)
                add([*base, alias.name] if sub.is_dir() or sub.with_suffix(".py").is_file() else base)
    return found


def _imports(path: Path, package: Path) -> set[str]:
    """The package's modules ``path`` imports (lazy ones too), as the table's first column names them; the
    package's ``__init__.py`` aside (its few importers are the paragraph's, ``test_only_the_modules_named...``)."""
    return {str(module.relative_to(package)) for module in _imported(path) if module != package / "__init__.py"}


def _rows() -> dict[str, str]:
    """Each row of the module table: its file -> its imports column."""
    found = {}
    for line in _section("The modules").splitlines():
        if line.startswith("| `"):
            cells = line.strip().strip("|").split(" | ")
            assert len(cells) == 4, line
            found[cells[0].strip().strip("`")] = cells[2]
    return found


def test_each_modules_imports_column_names_exactly_what_it_imports() -> None:
    wrong = {}
    for file, column in _rows().items():
        named = set(re.findall(r"`([^`]+)`", column))
        actual = {_module(PACKAGE / module) for module in _imports(PACKAGE / file, PACKAGE)}
        if named != actual:
            wrong[file] = {"imported, not named": sorted(actual - named), "named, not imported": sorted(named - actual)}
    assert len(_rows()) > 50
    assert wrong == {}


def test_the_imports_column_check_sees_lazy_absolute_and_package_imports() -> None:
    source = ("def f():\n    from ... import releases, upstream\n    from ...upstream import unit, START\n"
              "    import accelerate_warmup_patch.cli.child\n    from accelerate_warmup_patch import __version__\n"
              "    from .. import config_facts\n    import json\n")
    found = {_module(module) for module in _imported(PACKAGE / "cli" / "audit" / "judge.py", source)}
    assert found == {"releases", "upstream", "upstream.unit", "cli.child", "cli.config_facts", "__init__"}


def test_only_the_modules_the_map_names_import_the_package_init() -> None:
    text = _section("The modules")
    paragraph = text[text.index("no module but"):text.index("imports the package's `__init__.py`")]
    spans = re.findall(r"`([^`]+\.py)`", paragraph)  # `main.py`, `audit/parts.py`: a file's path, its end written
    named = {file for file in _rows() if any(file == span or file.endswith(f"/{span}") for span in spans)}
    importers = {file for file in _rows() if PACKAGE / "__init__.py" in _imported(PACKAGE / file)}
    assert named == importers


def test_each_module_imports_only_modules_below_it_in_the_table() -> None:
    package = ROOT / "accelerate_warmup_patch"
    rows = re.findall(r"^\| `([^`]+\.py)` \|", _section("The modules"), re.M)
    below = {name: set(rows[index + 1:]) for index, name in enumerate(rows)}
    upward = {name: sorted(_imports(package / name, package) - below[name]) for name in rows
              if (package / name).is_file()}
    assert {name: up for name, up in upward.items() if up} == {}


def test_the_audits_field_table_names_every_field_of_a_report_and_no_other() -> None:
    from accelerate_warmup_patch.cli.audit.report import FIELDS

    text = (ROOT / "docs" / "audit.md").read_text()
    table = text[text.index("| field (`--json`) | from |"):]
    table = table[:table.index("\n\n")]
    named = re.findall(r"`([a-z0-9_]+)`", "\n".join(row.split(" | ")[0] for row in table.splitlines()[2:]))
    assert sorted(named) == sorted(FIELDS)


# The reference release: named once (releases.BEHAVIOR_REFERENCE), in the code and in the docs -------------------

VERSION = r"(\d+\.\d+\.\d+)"
# the ways the docs name the reference release ("0.19.8 runs it at", "as on DeepSpeed 0.19.8", "0.19.8's formulas"):
# a number in any of them is the reference's, so that moving BEHAVIOR_REFERENCE fails here until the docs follow
REFERENCE_PHRASES = [re.compile(pattern) for pattern in (
    rf"\b{VERSION} (?:runs (?:it|step 0)|peaks at|starts the two|holds cos_min_ratio)",
    rf"\bas on (?:DeepSpeed )?{VERSION}(?!\.?\d)",
    rf"\bas {VERSION}(?:'s (?:own )?constructor| runs| does)",
    rf"(?:against|with|`expected`:) {VERSION}'s formulas?",
    rf"\b{VERSION}'s (?:lrs?|own constructor|constructor)\b",
    rf"(?:lr is|lr and|than|starts at) (?:on )?{VERSION}'s",
    rf"\blr than on {VERSION}\b",
    rf"\band on {VERSION};",
    rf"\bon {VERSION} \(and the default",
    rf"(?:reference release|BEHAVIOR_REFERENCE)[^.\n]{{0,80}}?{VERSION}",
    rf"{VERSION}, `(?:releases\.)?BEHAVIOR_REFERENCE`",
)]


def test_every_doc_that_names_the_reference_release_names_behavior_reference() -> None:
    from accelerate_warmup_patch import releases

    named = [(f"{page.relative_to(ROOT)}", number) for page in PAGES
             for phrase in REFERENCE_PHRASES for number in phrase.findall(page.read_text(encoding="utf-8"))]
    assert len(named) >= 25, named  # the check reads what it claims to
    assert [(page, number) for page, number in named if number != releases.BEHAVIOR_REFERENCE] == []


def test_the_reference_phrases_find_a_stale_number() -> None:
    stale = "step 0's lr and 0.20.0's; 0.20.0 runs it at 0.0, as on DeepSpeed 0.20.0. (`BEHAVIOR_REFERENCE`, 0.20.0)"
    assert sum(len(phrase.findall(stale)) for phrase in REFERENCE_PHRASES) == 4
    assert not any(phrase.search("DeepSpeed 0.9.0 to 0.19.8 (older: nothing") for phrase in REFERENCE_PHRASES)


def _strings_said(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are no docstring: what it writes, logs, returns or prints."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and id(node) not in docstrings]


def test_the_code_names_the_reference_release_only_through_behavior_reference() -> None:
    from accelerate_warmup_patch import releases

    # the guard table's own rooms cite the releases they were read at, the reference among them; its upstream units
    # name it through BEHAVIOR_REFERENCE like every other room
    spelled = [f"{room}:{line}: {text[:80]!r}" for room, path in rooms().items()
               if room.startswith("upstream/") or not in_rooms(room, TABLE_ROOMS) for line, text in _strings_said(path)
               if re.search(rf"(?<![\d.]){re.escape(releases.BEHAVIOR_REFERENCE)}(?![\d])", text)]
    assert spelled == []
