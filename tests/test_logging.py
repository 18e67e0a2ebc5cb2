"""The package's lines by the convention of libraries: shown on stderr while nothing configures logging, and
through the program's configuration alone once something does (never twice, never at a level it hides)."""

from __future__ import annotations

import pytest
from conftest import run_python

INFO_LINE = "mode changed from reset to step"
WARNING_LINE = "apply(mode=...)='bogus' is not one of"
# one INFO line and one WARNING line of the package
SAY_BOTH = "awp.apply(); awp.apply('step'); awp.apply('bogus'); awp.apply('reset')\n"


def _lines(code: str) -> list[str]:
    proc = run_python("import logging, logging.config, sys\nimport accelerate_warmup_patch as awp\n" + code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [line for line in proc.stderr.splitlines() if INFO_LINE in line or WARNING_LINE in line]


def _count(lines: list[str], text: str) -> int:
    return sum(text in line for line in lines)


def test_with_nothing_configured_info_and_warning_show_once_on_stderr():
    lines = _lines(SAY_BOTH)
    assert _count(lines, INFO_LINE) == 1 and _count(lines, WARNING_LINE) == 1, lines
    assert all(line.startswith("[accelerate_warmup_patch] ") for line in lines), lines


@pytest.mark.parametrize(("level", "info_shown"), [("logging.INFO", 1), ("logging.WARNING", 0)])
def test_basic_config_before_the_first_line_decides_alone(level, info_shown):
    lines = _lines(f"logging.basicConfig(level={level}, format='%(levelname)s|%(name)s|%(message)s')\n" + SAY_BOTH)
    assert _count(lines, INFO_LINE) == info_shown and _count(lines, WARNING_LINE) == 1, lines
    assert all(line.split("|")[1] == "accelerate_warmup_patch" for line in lines), lines


def test_basic_config_after_the_first_line_takes_over_without_a_second_copy_or_a_hidden_level():
    lines = _lines("awp.apply(); awp.apply('step')\n"  # the first line, with nothing configured
                   "logging.basicConfig(format='%(levelname)s|%(message)s')\n"  # WARNING: hides INFO
                   "awp.apply('reset'); awp.apply('step'); awp.apply('bogus')\n")
    assert _count(lines, INFO_LINE) == 1, lines  # the one before basicConfig, and none after it
    assert lines[0].startswith("[accelerate_warmup_patch] INFO")
    assert lines[1:] == ["WARNING|" + lines[1].split("|", 1)[1]], lines


def test_dict_config_after_the_first_line_decides_alone():
    lines = _lines("awp.apply(); awp.apply('step')\n"
                   "logging.config.dictConfig({'version': 1, 'disable_existing_loggers': False, 'handlers': {'err': {"
                   "'class': 'logging.StreamHandler', 'formatter': 'f'}}, 'formatters': {'f': {'format': "
                   "'cfg|%(levelname)s|%(message)s'}}, 'root': {'level': 'ERROR', 'handlers': ['err']}})\n"
                   "awp.apply('reset'); awp.apply('step'); awp.apply('bogus')\n")
    assert lines == [line for line in lines if line.startswith("[accelerate_warmup_patch] INFO")], lines
    assert len(lines) == 1, lines  # ERROR hides both the later INFO and the WARNING
