"""The switch carried to every node of a multi-node launch (launcher.carry), per runner and release span.

The runners are stand-ins named as DeepSpeed's runner classes are (the table and carry go by the class's name,
through its MRO); the real ones, on real releases, are tests/test_multinode.py's and tests/test_real_launchers.py's.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable

import pytest

from accelerate_warmup_patch import launcher
from accelerate_warmup_patch.settings import ENV_MODE, ENV_RECORD, ENV_STRICT


class MultiNodeRunner:
    """What every runner's __init__ makes: the exports dict get_cmd writes into the command."""

    def __init__(self) -> None:
        self.exports: dict[str, str] = {}
        self.added: list[tuple[str, str]] = []

    def add_export(self, key: str, var: str) -> None:
        self.added.append((key, var))
        self.exports[key.strip()] = f'"{var.strip()}"'  # 0.15.2-0.16.4's quoting, which carry avoids


class PDSHRunner(MultiNodeRunner):
    pass


class OpenMPIRunner(MultiNodeRunner):
    pass


class MPICHRunner(MultiNodeRunner):
    pass


class IMPIRunner(MultiNodeRunner):
    pass


class SlurmRunner(MultiNodeRunner):
    pass


class MVAPICHRunner(MultiNodeRunner):
    pass


class ClusterRunner(PDSHRunner):
    """A user's subclass: it still runs the command through pdsh's shell."""


class SomeoneElsesRunner(MultiNodeRunner):
    """A runner the guard table does not know."""


HARD = "reset; touch /tmp/x 'q' \"d\" $HOME"  # what a shell on the node would run if it went in unquoted


@pytest.fixture(autouse=True)
def _unset(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(ENV_MODE, raising=False)
    monkeypatch.delenv(ENV_STRICT, raising=False)
    monkeypatch.delenv(ENV_RECORD, raising=False)
    caplog.set_level(logging.DEBUG, logger="accelerate_warmup_patch")


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "accelerate_warmup_patch" and r.levelno == level]


@pytest.mark.parametrize("version", ["0.9.0", "0.15.1", "0.15.2", "0.16.4", "0.16.5", "0.19.8", "0.20.0"])
@pytest.mark.parametrize("value", ["reset", "off", "warn", HARD, "a b", "x,y", ""])
def test_pdsh_gets_each_value_shell_quoted_on_every_release(version: str, value: str, monkeypatch: pytest.MonkeyPatch,
                                                            deepspeed_release: Callable[[str], None]) -> None:
    deepspeed_release(version)
    monkeypatch.setenv(ENV_MODE, value)
    runner = PDSHRunner()
    carried = launcher.carry(runner)
    if not value:
        assert carried == {} and runner.exports == {}
        return
    assert carried == {ENV_MODE: value}
    assert runner.exports == {ENV_MODE: shlex.quote(value)} and runner.added == []
    assert shlex.split(f"{ENV_MODE}={runner.exports[ENV_MODE]}") == [f"{ENV_MODE}={value}"]


@pytest.mark.parametrize("runner_class", [OpenMPIRunner, MPICHRunner, IMPIRunner, MVAPICHRunner, SlurmRunner])
@pytest.mark.parametrize("version", ["0.15.2", "0.16.5", "0.19.8"])
def test_runners_without_a_shell_get_the_value_as_it_is(runner_class: type[MultiNodeRunner], version: str,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        deepspeed_release: Callable[[str], None],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    deepspeed_release(version)
    value = "warn" if runner_class is SlurmRunner else "a b 'c'"  # Slurm's list: no comma in it
    monkeypatch.setenv(ENV_MODE, value)
    monkeypatch.setenv(ENV_STRICT, "1")
    runner = runner_class()
    assert launcher.carry(runner) == {ENV_MODE: value, ENV_STRICT: "1"}
    assert runner.exports == {ENV_MODE: value, ENV_STRICT: "1"}  # no quotes: no shell would take them off
    assert runner.added == []
    (info,) = _lines(caplog, logging.INFO)
    assert info.startswith(f"{runner_class.__name__} exports {ENV_MODE}={value}, {ENV_STRICT}=1 to every node (")


@pytest.mark.parametrize("value", ["a,b", "reset,", ",", "warn,off"])
def test_slurm_leaves_a_value_with_a_comma_out_of_its_list_and_says_so(value: str, monkeypatch: pytest.MonkeyPatch,
                                                                      deepspeed_release: Callable[[str], None],
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    deepspeed_release("0.15.2")
    monkeypatch.setenv(ENV_MODE, value)
    monkeypatch.setenv(ENV_STRICT, "1")
    runner = SlurmRunner()
    assert launcher.carry(runner) == {ENV_STRICT: "1"}
    assert runner.exports == {ENV_STRICT: "1"}
    (warning,) = _lines(caplog, logging.WARNING)
    assert f"SlurmRunner leaves {ENV_MODE} out of the list it exports: its value {value!r} holds ','" in warning


def test_slurm_with_only_a_comma_value_exports_nothing_and_says_nothing_more(
        monkeypatch: pytest.MonkeyPatch, deepspeed_release: Callable[[str], None],
        caplog: pytest.LogCaptureFixture) -> None:
    deepspeed_release("0.19.8")
    monkeypatch.setenv(ENV_MODE, "a,b")
    runner = SlurmRunner()
    assert launcher.carry(runner) == {} and runner.exports == {}
    assert len(_lines(caplog, logging.WARNING)) == 1 and _lines(caplog, logging.INFO) == []


def test_a_comma_is_only_slurms_problem(monkeypatch: pytest.MonkeyPatch,
                                        deepspeed_release: Callable[[str], None]) -> None:
    deepspeed_release("0.19.8")
    monkeypatch.setenv(ENV_MODE, "a,b")
    runner = OpenMPIRunner()
    assert launcher.carry(runner) == {ENV_MODE: "a,b"} and runner.exports == {ENV_MODE: "a,b"}


def test_a_subclass_of_a_known_runner_goes_by_its_base(monkeypatch: pytest.MonkeyPatch,
                                                       deepspeed_release: Callable[[str], None]) -> None:
    deepspeed_release("0.15.2")
    monkeypatch.setenv(ENV_MODE, HARD)
    runner = ClusterRunner()
    launcher.carry(runner)
    assert runner.exports == {ENV_MODE: shlex.quote(HARD)} and runner.added == []


@pytest.mark.parametrize("version", ["0.9.0", "0.15.2", "0.19.8"])
def test_an_unknown_runner_gets_the_values_through_its_own_add_export(
        version: str, monkeypatch: pytest.MonkeyPatch, deepspeed_release: Callable[[str], None],
        caplog: pytest.LogCaptureFixture) -> None:
    deepspeed_release(version)
    monkeypatch.setenv(ENV_MODE, "step")
    monkeypatch.setenv(ENV_STRICT, "true")
    runner = SomeoneElsesRunner()
    assert launcher.carry(runner) == {ENV_MODE: "step", ENV_STRICT: "true"}
    assert runner.added == [(ENV_MODE, "step"), (ENV_STRICT, "true")]
    (info,) = _lines(caplog, logging.INFO)
    assert "add_export (a runner the guard table does not know)" in info


def test_a_runner_its_release_lacks_is_unknown(monkeypatch: pytest.MonkeyPatch,
                                               deepspeed_release: Callable[[str], None]) -> None:
    deepspeed_release("0.9.2")  # IMPIRunner came in 0.9.3
    monkeypatch.setenv(ENV_MODE, "reset")
    runner = IMPIRunner()
    launcher.carry(runner)
    assert runner.added == [(ENV_MODE, "reset")]


@pytest.mark.parametrize(("version", "says_left_out"), [("0.9.0", True), ("0.9.1", True), ("0.9.2", False)])
def test_mpich_before_0_9_2_builds_its_exports_but_leaves_them_out_and_a_warning_says_so(
        version: str, says_left_out: bool, monkeypatch: pytest.MonkeyPatch, deepspeed_release: Callable[[str], None],
        caplog: pytest.LogCaptureFixture) -> None:
    deepspeed_release(version)
    monkeypatch.setenv(ENV_MODE, "reset")
    runner = MPICHRunner()
    assert launcher.carry(runner) == {ENV_MODE: "reset"}
    assert runner.exports == {ENV_MODE: "reset"}
    warnings = _lines(caplog, logging.WARNING)
    assert bool(warnings) is says_left_out
    if says_left_out:
        assert f"MPICHRunner of DeepSpeed {version} leaves its exports out of the command it builds" in warnings[0]
        assert _lines(caplog, logging.INFO) == []


@pytest.mark.parametrize("env", [{}, {ENV_MODE: ""}, {ENV_MODE: "  \t"}, {ENV_STRICT: " "}])
def test_nothing_set_carries_nothing_and_says_nothing(env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                                      deepspeed_release: Callable[[str], None],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    deepspeed_release("0.15.2")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    runner = PDSHRunner()
    assert launcher.carry(runner) == {}
    assert runner.exports == {} and caplog.records == []


def test_strict_alone_is_carried(monkeypatch: pytest.MonkeyPatch, deepspeed_release: Callable[[str], None]) -> None:
    deepspeed_release("0.15.2")
    monkeypatch.setenv(ENV_STRICT, "1")
    runner = OpenMPIRunner()
    assert launcher.carry(runner) == {ENV_STRICT: "1"} and runner.exports == {ENV_STRICT: "1"}


@pytest.mark.parametrize("runner_class", [PDSHRunner, OpenMPIRunner, SlurmRunner, SomeoneElsesRunner])
def test_a_value_that_is_not_printable_is_logged_as_repr_shows_it(runner_class: type[MultiNodeRunner],
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   deepspeed_release: Callable[[str], None],
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    # the review's case: the INFO line printed the raw value, so a value holding a newline and a line of
    # DeepSpeed's own forged a log line (the WARNING already escaped it)
    deepspeed_release("0.19.8")
    forged = "1\n[deepspeed] INFO: forged"
    monkeypatch.setenv(ENV_MODE, "reset")
    monkeypatch.setenv(ENV_STRICT, forged)
    launcher.carry(runner_class())
    (info,) = _lines(caplog, logging.INFO)
    assert "\n" not in info
    assert f"exports {ENV_MODE}=reset, {ENV_STRICT}={forged!r} to every node" in info, info


def test_exports_that_are_not_a_dict_are_an_error_for_the_wrapper_to_report(
        monkeypatch: pytest.MonkeyPatch, deepspeed_release: Callable[[str], None]) -> None:
    deepspeed_release("0.15.2")
    monkeypatch.setenv(ENV_MODE, "reset")
    runner = PDSHRunner()
    runner.exports = []  # type: ignore[assignment]
    with pytest.raises(TypeError, match=r"PDSHRunner\.exports is a list, not a dict"):
        launcher.carry(runner)


@pytest.mark.parametrize("runner_class", [PDSHRunner, OpenMPIRunner, SlurmRunner])
def test_the_record_setting_reaches_every_node_as_the_switch_does(runner_class: type[MultiNodeRunner],
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 deepspeed_release: Callable[[str], None]) -> None:
    # rank 0 (or each node's local rank 0) writes the record: under pdsh it runs on a node the shell never reached
    deepspeed_release("0.15.2")
    monkeypatch.setenv(ENV_MODE, "reset")
    monkeypatch.setenv(ENV_RECORD, "off")
    runner = runner_class()
    assert launcher.carry(runner) == {ENV_MODE: "reset", ENV_RECORD: "off"}
    assert runner.exports == {ENV_MODE: "reset", ENV_RECORD: "off"}
