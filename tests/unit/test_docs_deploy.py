"""The admin's docs checked like code, each kind of statement against its source, so that none drifts again (#57):

- a variable's values: the README's table of variables against settings.py's spellings, and the modes the
  modulefiles and the image recipe set;
- a verdict's visibility: where the README and docs/audit.md say when `skipped` and the summary are shown;
- a module path: each `module use` line's folder against the one deploy/install-prefix.sh fills, with the module
  system its files are for, and each module named against the ones it installs;
- a recipe's completeness: deploy/Dockerfile's instructions, and the copies of the recipes the docs show;
- the README's first screen: the admin's menu, and "am I affected" against the guard table.

Standard library only (the audit runs as a child process, on files it writes).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import test_docs
from test_docs import FENCE, README, ROOT

sys.path.insert(0, str(ROOT / "tests"))
import quickstart
import tiers

from accelerate_warmup_patch import releases, settings, upstream

DEPLOY = ROOT / "deploy"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
AUDIT_DOC = ROOT / "docs" / "audit.md"
INSTALL_PREFIX = DEPLOY / "install-prefix.sh"


def _readme() -> str:
    return README.read_text(encoding="utf-8")


# A variable's values ---------------------------------------------------------------------------------------------

def _variables_table() -> dict[str, tuple[str, str]]:
    """The README's table of variables: each variable's cells (what unset does, the values)."""
    rows = re.findall(r"^\| `(ACCELERATE_WARMUP_PATCH\w*)` \| (.+?) \| (.+) \|$", _readme(), re.M)
    return {name: (unset, values) for name, unset, values in rows}


def _spellings(values: str) -> dict[str, str]:
    """Each spelling a values cell names, to the value it stands for: "`reset` (also `1`, `true`): ...; `step`: ...".
    """
    found: dict[str, str] = {}
    for value, also in re.findall(r"`([\w]+)`(?: \(also ((?:`\w+`(?:, )?)+)\))?:", values):
        for spelling in [value, *re.findall(r"`(\w+)`", also)]:
            assert spelling not in found, f"{spelling} named twice"
            found[spelling] = value
    return found


def test_the_readme_has_a_row_with_its_default_for_every_variable_settings_reads() -> None:
    known = {value for name, value in vars(settings).items() if name.startswith("ENV_")}
    table = _variables_table()
    assert set(table) == known, table.keys()
    assert "| variable | unset (the default) | values |" in _readme()
    assert all(unset.strip() for unset, _ in table.values())


def test_the_modes_the_readme_lists_are_every_spelling_settings_accepts() -> None:
    _, values = _variables_table()[settings.ENV_MODE]
    spellings = _spellings(values)
    assert {spelling: settings.lookup(value) for spelling, value in spellings.items()} == dict(settings._ALIASES)
    assert "any other value: nothing is patched" in values  # a mistyped kill switch changes nothing


def test_the_records_values_the_readme_lists_are_every_spelling_settings_accepts() -> None:
    _, values = _variables_table()[settings.ENV_RECORD]
    spellings = _spellings(values)
    wanted = {spelling: {"on": True, "off": False}[value] for spelling, value in spellings.items()}
    assert wanted == dict(settings._RECORD)  # the off words all turn it off (#57: "another value" said otherwise)
    assert "any other value: still written, one warning" in values


def test_the_strict_values_the_readme_lists_are_every_spelling_settings_accepts() -> None:
    _, values = _variables_table()[settings.ENV_STRICT]
    assert set(_spellings(values)) == set(settings._TRUE)


def test_every_mode_a_deploy_file_sets_is_one_settings_accepts() -> None:
    lua = (DEPLOY / "modulefiles" / "accelerate-warmup-patch.lua").read_text()
    tcl = (DEPLOY / "modulefiles" / "accelerate-warmup-patch.tcl").read_text()
    recipe = (DEPLOY / "Dockerfile").read_text()
    modes = (list(re.findall(r'and "(\w+)" or "(\w+)"', lua)[0]) + re.findall(r"set mode (\w+)", tcl)
             + re.findall(r"^ENV ACCELERATE_WARMUP_PATCH=(\w+)$", recipe, re.M))
    assert sorted(set(modes)) == ["reset", "warn"], modes
    assert all(settings.lookup(mode) == mode for mode in modes)


# A verdict's visibility ------------------------------------------------------------------------------------------

def _sentences_naming(text: str, word: str) -> list[str]:
    """Each table row, and each sentence (or clause after a semicolon) of the prose, that names ``word``."""
    lines = FENCE.sub("", text).splitlines()
    rows = [line for line in lines if line.startswith("|")]
    prose = " ".join(" ".join(line for line in lines if not line.startswith("|")).split())
    return [unit for unit in rows + re.split(r"(?<=[.;])\s", prose) if word in unit]


def test_where_a_symlinked_folder_is_said_to_be_skipped_the_docs_say_only_with_verbose() -> None:
    # `audit` names each symlinked folder `skipped` only with --verbose, and else counts them in the summary
    for page in (README, AUDIT_DOC):
        claims = [s for s in _sentences_naming(page.read_text(encoding="utf-8"), "`skipped`") if "symlink" in s]
        assert claims, page
        assert all("--verbose" in claim for claim in claims), claims


def test_the_summary_is_always_printed_and_an_audit_that_judged_nothing_exits_2(tmp_path: Path) -> None:
    # a PATH with no run: its error line, then the summary saying nothing was judged, exit 2 (#55 item 5: silence
    # read as all-clear); the README, docs/audit.md and the array recipe say so
    proc = subprocess.run([sys.executable, "-m", "accelerate_warmup_patch", "audit", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    said = proc.stdout.splitlines()  # the text's summary, on stdout; the PATH's error line on stderr
    assert proc.returncode == 2 and said and said[0].startswith("summary") and proc.stderr, proc
    assert "nothing was judged" in said[-1], proc
    line = quickstart.line("accelerate-warmup-patch audit /runs")
    comment = next(x for x in _readme().splitlines() if x.startswith(line)).split("  #", 1)[1]
    assert "summary always" in comment, comment
    doc = " ".join(AUDIT_DOC.read_text().split())
    assert "summary always closes the output" in doc and "nothing was judged" in doc, "docs/audit.md"
    assert "exits 2" in (DEPLOY / "audit-array.sbatch").read_text().replace("\n# ", " "), "the array recipe"


# A module path ---------------------------------------------------------------------------------------------------

def _installed_folders() -> dict[str, str]:
    """What deploy/install-prefix.sh copies into each PREFIX folder of modulefiles: "lua" or "tcl"."""
    script = INSTALL_PREFIX.read_text()
    return {folder: kind for kind, folder in
            re.findall(r'cp "\$here/modulefiles/accelerate-warmup-patch\.(lua|tcl)" "\$prefix/([\w-]+)/', script)}


def _installed_names() -> list[str]:
    found = re.search(r"^for name in ([\w -]+); do$", INSTALL_PREFIX.read_text(), re.M)
    assert found is not None, "install-prefix.sh's loop over the modules' names"
    return found.group(1).split()


SYSTEM_OF = {"lua": "Lmod", "tcl": "Environment Modules"}


@pytest.mark.parametrize("page", [README, DEPLOY_DOC], ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_use_line_names_a_folder_the_prefix_install_fills_with_its_systems_files(page: Path) -> None:
    folders = _installed_folders()
    assert sorted(folders.values()) == ["lua", "tcl"], folders
    text = page.read_text(encoding="utf-8")
    uses = re.findall(r"^module use /opt/accelerate-warmup-patch/([\w-]+)\s+# (.*)$", text, re.M)
    assert sorted(folder for folder, _ in uses) == sorted(folders), uses  # each system its own line
    for folder, comment in uses:
        assert comment.startswith(SYSTEM_OF[folders[folder]]), (folder, comment)


def test_each_modulefile_is_of_the_system_its_folder_is_for() -> None:
    assert (DEPLOY / "modulefiles" / "accelerate-warmup-patch.tcl").read_text().startswith("#%Module")
    assert not (DEPLOY / "modulefiles" / "accelerate-warmup-patch.lua").read_text().startswith("#%Module")


def test_every_module_the_docs_load_is_one_the_prefix_install_installs() -> None:
    names = set(_installed_names())
    assert names == {"accelerate-warmup-patch", "accelerate-warmup-patch-warn"}
    for page in (README, DEPLOY_DOC):
        named = re.findall(r"^module (?:load|unload|switch) ([\w -]+?)\s+#", page.read_text(encoding="utf-8"), re.M)
        assert named and {word for line in named for word in line.split()} <= names, named


# A recipe's completeness -----------------------------------------------------------------------------------------

def _instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's instructions, in order, continuation lines joined; comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", "\n".join(x for x in text.splitlines() if not x.lstrip().startswith("#")))
    return [(line.split(" ", 1)[0], line.split(" ", 1)[1].strip()) for line in joined.splitlines() if line.strip()]


def test_the_image_recipe_is_whole() -> None:
    steps = _instructions((DEPLOY / "Dockerfile").read_text())
    names = [name for name, _ in steps]
    assert names[:2] == ["ARG", "FROM"] and steps[1][1] == "${BASE}" and steps[0][1].startswith("BASE="), steps
    (install,) = [argument for name, argument in steps if name == "RUN" and "pip install" in argument]
    assert "--no-index" in install and "--find-links" in install, install  # offline: a local wheel folder
    assert all("--break-system-packages" not in argument for _, argument in steps)
    env = names.index("ENV")
    assert steps[env][1].startswith(f"{settings.ENV_MODE}=") and steps[-1] == ("RUN", "accelerate-warmup-patch "
                                                                               "doctor --strict")
    assert names.index("COPY") < names.index("RUN") < env < len(steps) - 1  # the check after the ENV line


def _block(page: Path, language: str) -> str:
    blocks = re.findall(rf"^```{language}\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) == 1, (page, language, len(blocks))
    return str(blocks[0])


def test_the_recipes_the_docs_show_are_the_files() -> None:
    recipe = (DEPLOY / "Dockerfile").read_text()
    assert _instructions(_block(DEPLOY_DOC, "dockerfile")) == _instructions(recipe)
    script = (DEPLOY / "audit-array.sbatch").read_text()
    shown = [block for block in re.findall(r"^```sh\n(.*?)^```", AUDIT_DOC.read_text(), re.M | re.S)
             if block.startswith("#!/bin/bash")]
    assert shown == [script], "docs/audit.md shows deploy/audit-array.sbatch as it is"


def test_the_array_script_execs_the_audit() -> None:
    # the audit must be the task's process: scancel's SIGTERM then reaches it, and it writes its closing line (#57)
    assert test_docs._array_audit_line().startswith("accelerate-warmup-patch audit --jsonl ")
    assert "exec accelerate-warmup-patch audit" in (DEPLOY / "audit-array.sbatch").read_text()


def test_the_readmes_wheel_name_is_the_one_the_docs_download_for_an_image() -> None:
    line = quickstart.line("python3 -m pip download", DEPLOY_DOC)
    wheel = re.search(r"dist/(accelerate_warmup_patch-\S+\.whl)", quickstart.line("python3 -m pip install dist/"))
    assert wheel is not None and f"dist/{wheel.group(1)}" in line, line


# The README's first screen ---------------------------------------------------------------------------------------

MENU = ("**Turn it on**", "**Check**", "**Turn it off**", "**Audit**")


def test_the_first_40_lines_are_an_admins_menu() -> None:
    top = _readme().splitlines()[:40]
    assert any(line.startswith("**Am I affected?**") for line in top)
    for task in MENU:
        (line,) = [x for x in top if x.startswith(f"- {task}")]
        assert re.search(r"\]\(#?[\w./-]+(#[\w-]+)?\)", line) and "`" in line, line  # its command and a link
    assert any("DeepSpeedEngineWrapper.backward" in line for line in top)  # what is not wrapped, and why


def _range(versions: list[str]) -> str:
    return f"{versions[0]} to {versions[-1]}"


def test_am_i_affected_names_the_ranges_the_guard_table_gives() -> None:
    every = sorted({*tiers.ENGINE_TIER, *tiers.SCHEDULER_TIER}, key=releases.parse)
    clean = ("fixed upstream", "not affected", "absent")  # the words of a class that needs nothing
    all_jobs = [v for v in every if upstream.lacks(upstream.START, "WarmupLR", v)]
    some = [v for v in every if v not in all_jobs and set(upstream.verdicts(v).values()) - set(clean)]
    none = [v for v in every if v not in all_jobs and v not in some]
    assert every == all_jobs + some + none, (all_jobs, some)  # three ranges, one after the other
    found = re.search(r"\*\*Am I affected\?\*\*(.*?)\n\n", _readme(), re.S)
    assert found is not None
    said = " ".join(found.group(1).split())
    assert f"DeepSpeed {_range(all_jobs)}, yes" in said, said
    assert f"{_range(some)}, in some" in said, said
    assert f"{none[0]} and newer, no" in said, said
