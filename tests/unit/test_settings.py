"""ACCELERATE_WARMUP_PATCH, _STRICT and _RECORD: every spelling, blank, unknown, strict, precedence.

The real-interpreter tests (tests/test_activation.py) keep one value of each kind, read at start-up by the .pth;
the value rules themselves are here.
"""

from __future__ import annotations

import logging

import pytest

from accelerate_warmup_patch import settings
from accelerate_warmup_patch.settings import ENV_MODE, ENV_RECORD, ENV_STRICT, Mode

RESET_SPELLINGS = ["reset", "1", "true", "on", "yes", "enable", "enabled"]
OFF_SPELLINGS = ["off", "0", "false", "no", "none", "disable", "disabled"]
ACCEPTED = [*((v, Mode.RESET) for v in RESET_SPELLINGS), ("step", Mode.STEP), ("warn", Mode.WARN),
            *((v, Mode.OFF) for v in OFF_SPELLINGS)]
NOT_ACCEPTED = ["maybe", "o f f", "nope", "warn-me", "resett", "2", "-1", "stepping", "y", "t", "reset,step"]
BLANK = ["", " ", "\t", "\n", "  \t ", "\r\n"]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "accelerate_warmup_patch" and r.levelno == logging.WARNING]


@pytest.fixture(autouse=True)
def _unset(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(ENV_MODE, raising=False)
    monkeypatch.delenv(ENV_STRICT, raising=False)
    monkeypatch.delenv(ENV_RECORD, raising=False)
    caplog.set_level(logging.INFO, logger="accelerate_warmup_patch")


@pytest.mark.parametrize(("value", "mode"), ACCEPTED)
def test_every_accepted_spelling_in_any_case_and_padding(value: str, mode: str, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    for spelling in (value, value.upper(), value.capitalize(), f"  {value}\t", f"\n{value.upper()} "):
        assert settings.lookup(spelling) == mode
        monkeypatch.setenv(ENV_MODE, spelling)
        assert settings.env_mode() == mode
        assert settings.env_setting() == (mode, True)
        assert settings.resolve(None) == mode
    assert _warnings(caplog) == []


def test_the_accepted_spellings_are_the_ones_the_message_lists() -> None:
    # the message a user reads names every spelling, and only those
    listed = settings.ACCEPTED.replace("(or ", "").replace(")", "").replace(",", " ").split()
    assert sorted(listed) == sorted(value for value, _ in ACCEPTED)


@pytest.mark.parametrize("value", BLANK)
def test_a_blank_value_is_unset(value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(ENV_MODE, value)
    assert settings.env_mode() is None
    assert settings.env_setting() == (None, True)
    assert settings.resolve(None) == settings.DEFAULT == Mode.RESET  # an import arms, as when unset
    assert settings.resolve("step") == Mode.STEP
    assert _warnings(caplog) == []


def test_unset_is_none_and_an_import_arms_the_default() -> None:
    assert settings.env_mode() is None
    assert settings.env_setting() == (None, True)
    assert settings.resolve(None) == Mode.RESET


@pytest.mark.parametrize("value", NOT_ACCEPTED)
def test_a_value_not_accepted_is_off_with_one_warning_naming_the_accepted_ones(
        value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(ENV_MODE, value)
    assert settings.lookup(value) is None
    # read three times, as a process does (the .pth, the import, apply()): one warning
    assert [settings.env_mode(), settings.env_mode(), settings.resolve(None)] == [Mode.OFF] * 3
    assert settings.resolve("step") == Mode.OFF  # off, even from a typo, wins over the caller's mode
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert f"{ENV_MODE}={value!r}" in warnings[0] and settings.ACCEPTED in warnings[0]
    assert "nothing is changed by it" in warnings[0] and f"set {ENV_MODE} to one of these" in warnings[0]


@pytest.mark.parametrize("value", NOT_ACCEPTED[:3])
def test_env_setting_reads_a_value_not_accepted_as_off_and_says_nothing(
        value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(ENV_MODE, value)
    monkeypatch.setenv(ENV_STRICT, "1")
    assert settings.env_setting() == (Mode.OFF, False)  # what doctor and status report: no raise, no warning
    assert _warnings(caplog) == []


@pytest.mark.parametrize("value", ["1", "true", "on", "yes", "enable", "enabled", " TRUE ", "Yes\n", "ON"])
def test_strict_spellings_that_mean_yes(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_STRICT, value)
    assert settings.strict() is True


@pytest.mark.parametrize("value", ["0", "false", "no", "off", "", " ", "\t", "2", "strict", "reset", "y"])
def test_strict_spellings_that_mean_no(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_STRICT, value)
    assert settings.strict() is False


def test_strict_unset_is_no() -> None:
    assert settings.strict() is False


@pytest.mark.parametrize("value", NOT_ACCEPTED[:4])
def test_strict_turns_a_value_not_accepted_into_an_error_that_names_it(
        value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(ENV_MODE, value)
    monkeypatch.setenv(ENV_STRICT, "1")
    with pytest.raises(settings.SettingsError, match=settings.ACCEPTED.replace("(", r"\(").replace(")", r"\)")) as e:
        settings.env_mode()
    assert f"{ENV_MODE}={value!r}" in str(e.value)
    assert isinstance(e.value, ValueError)
    with pytest.raises(settings.SettingsError):
        settings.resolve(None)
    assert _warnings(caplog) == []


def test_strict_is_read_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_MODE, "maybe")
    assert settings.env_mode() == Mode.OFF
    monkeypatch.setenv(ENV_STRICT, "yes")
    with pytest.raises(settings.SettingsError):
        settings.env_mode()


@pytest.mark.parametrize(("env", "requested", "resolved"), [
    (None, None, Mode.RESET),  # unset: an import arms reset
    (None, "step", Mode.STEP), (None, "warn", Mode.WARN), (None, "off", Mode.OFF), (None, " Reset ", Mode.RESET),
    ("warn", None, Mode.WARN),  # the environment's mode when the caller names none
    ("warn", "step", Mode.STEP), ("step", "reset", Mode.RESET),  # the caller's over the environment's
    ("reset", "off", Mode.OFF),
    ("off", "step", Mode.OFF), ("0", "reset", Mode.OFF), ("disabled", "warn", Mode.OFF),  # off in the env wins
    ("maybe", "step", Mode.OFF),  # a value not accepted is off, and off wins
    (None, "bogus", None), ("reset", "rset", None),  # a mode not accepted from the caller: nothing is to change
    ("off", "bogus", Mode.OFF),
])
def test_resolve_off_in_the_environment_wins_then_the_callers_then_the_environments(
        env: str | None, requested: str | None, resolved: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if env is not None:
        monkeypatch.setenv(ENV_MODE, env)
    assert settings.resolve(requested) == resolved


def test_a_callers_mode_not_accepted_warns_once_naming_apply(caplog: pytest.LogCaptureFixture) -> None:
    assert settings.resolve("rset") is None
    assert settings.resolve("rset") is None
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "apply(mode=...)='rset' is not one of" in warnings[0] and "pass one of these" in warnings[0]
    assert settings.resolve("bogus") is None
    assert len(_warnings(caplog)) == 2  # once per value


def test_a_callers_mode_not_accepted_raises_under_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_STRICT, "1")
    with pytest.raises(settings.SettingsError, match=r"apply\(mode=...\)='rset'"):
        settings.resolve("rset")


# ACCELERATE_WARMUP_PATCH_RECORD: whether an armed job writes its record beside each checkpoint (docs/mark.md)

RECORD_ON = [v for v in RESET_SPELLINGS if v != "reset"]  # the on words of ACCELERATE_WARMUP_PATCH itself


def test_the_record_is_written_when_the_setting_is_unset(caplog: pytest.LogCaptureFixture) -> None:
    assert settings.record_wanted() is True
    assert _warnings(caplog) == []


@pytest.mark.parametrize("value", BLANK)
def test_a_blank_record_setting_is_unset(value: str, monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(ENV_RECORD, value)
    assert settings.record_wanted() is True
    assert _warnings(caplog) == []


@pytest.mark.parametrize(("value", "wanted"), [*((v, True) for v in RECORD_ON), *((v, False) for v in OFF_SPELLINGS)])
def test_the_record_setting_takes_the_on_and_off_words_of_the_switch_in_any_case_and_padding(
        value: str, wanted: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    for spelling in (value, value.upper(), value.capitalize(), f"  {value}\t", f"\n{value.upper()} "):
        monkeypatch.setenv(ENV_RECORD, spelling)
        assert settings.record_wanted() is wanted, spelling
    assert _warnings(caplog) == []


def test_the_record_settings_message_lists_exactly_its_spellings() -> None:
    listed = settings.RECORD_ACCEPTED.replace("(or ", "").replace(")", "").replace(",", " ").split()
    assert sorted(listed) == sorted([*RECORD_ON, *OFF_SPELLINGS])


@pytest.mark.parametrize("value", ["of", "offf", "o f f", "reset", "warn", "2", "nope", "off,on"])
def test_a_record_setting_not_accepted_keeps_the_record_with_one_warning(
        value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # the record is what lets audit prove a run fixed: a mistyped "off" must not quietly drop that proof
    monkeypatch.setenv(ENV_RECORD, value)
    assert [settings.record_wanted() for _ in range(3)] == [True] * 3  # a save each: one warning
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert f"{ENV_RECORD}={value!r}" in warnings[0] and settings.RECORD_ACCEPTED in warnings[0]
    assert "the record is still written" in warnings[0]


def test_a_record_setting_not_accepted_is_an_error_under_strict(monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(ENV_RECORD, "offf")
    monkeypatch.setenv(ENV_STRICT, "1")
    with pytest.raises(settings.SettingsError, match=f"{ENV_RECORD}='offf'"):
        settings.record_wanted()
    monkeypatch.setenv(ENV_RECORD, "off")
    assert settings.record_wanted() is False  # an accepted value is no error
    assert _warnings(caplog) == []


def test_the_record_setting_changes_no_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_RECORD, "off")
    assert settings.env_mode() is None and settings.resolve(None) == Mode.RESET
