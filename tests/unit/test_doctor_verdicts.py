"""doctor's verdict line and state for each release and activation (doctor_states.decide), without an interpreter.

tests/test_doctor.py runs the command itself on the states whose environment changes what a new process does;
the line of every state, on every kind of release, is decided here from the activation doctor found.
"""

from __future__ import annotations

from typing import Any

import pytest

from accelerate_warmup_patch import settings
from accelerate_warmup_patch.cli import arming, doctor_states

ENV = settings.ENV_MODE
PTH = "/venv/lib/python3.11/site-packages/accelerate_warmup_patch.pth"
NOT_ACTIVE = f"patch NOT active in new processes: set {ENV}=reset"
ACTIVE = f"patch active in new processes (reset mode, through {ENV} + the .pth): fixed"
ALL_THREE = "WarmupLR, WarmupDecayLR, WarmupCosineLR"


def _active(env: str | None) -> dict[str, Any]:
    """The activation section doctor finds for a value of ACCELERATE_WARMUP_PATCH, with the .pth installed."""
    mode = settings.lookup(env) if env and env.strip() else None
    armed = mode in (settings.Mode.RESET, settings.Mode.STEP, settings.Mode.WARN)
    return {"env": env, "mode": mode if armed or mode == settings.Mode.OFF else "not armed", "pth": PTH,
            "sitecustomize": None, "active_at_start_up": armed,
            "through": [f"env var {ENV}={env!r} + {arming.PTH}"] if armed else [], "python": "python",
            "why_not": None}


# state -> (DeepSpeed release, ACCELERATE_WARMUP_PATCH, verdict line)
STATES: dict[str, tuple[str | None, str | None, str]] = {
    "affected-not-active": ("0.15.2", None, f"DeepSpeed 0.15.2: AFFECTED ({ALL_THREE}) - {NOT_ACTIVE}"),
    "affected-active": ("0.15.2", "reset", f"DeepSpeed 0.15.2: AFFECTED ({ALL_THREE}) - {ACTIVE}"),
    "affected-not-active (off)": ("0.17.0", "off", "DeepSpeed 0.17.0: AFFECTED (WarmupCosineLR, groups 1+) - patch NOT "
                                  f"active in new processes: {ENV}=off turns it off; set it to reset"),
    "affected-not-active (0.12.2)": ("0.12.2", None, f"DeepSpeed 0.12.2: AFFECTED (WarmupLR, WarmupDecayLR) - "
                                     f"{NOT_ACTIVE}"),  # no WarmupCosineLR before 0.12.3
    "backports-not-active": ("0.19.2", None, "DeepSpeed 0.19.2: fixed upstream; the patch still backports default "
                             "peak (#8171) to WarmupLR; ratio past warmup (#8142), unknown warmup "
                             f"type (#8151) to WarmupCosineLR - {NOT_ACTIVE}"),
    "backports-active": ("0.19.3", "reset", "DeepSpeed 0.19.3: fixed upstream; the patch still backports default "
                         "peak (#8171) to WarmupLR; unknown warmup type (#8151) to WarmupCosineLR - "
                         f"{ACTIVE}"),
    "backports-warn": ("0.19.3", "warn", "DeepSpeed 0.19.3: fixed upstream; the patch still backports default peak "
                       "(#8171) to WarmupLR; unknown warmup type (#8151) to WarmupCosineLR - patch in "
                       f"warn mode in new processes (through {ENV} + the .pth): they run unpatched and warn once per "
                       f"affected scheduler; set {ENV}=reset to fix them"),
    "fixed-upstream": ("0.19.8", None, "DeepSpeed 0.19.8: fixed upstream, the patch changes nothing (step mode still "
                       "applies if chosen)"),
    "fixed-upstream (0.19.4)": ("0.19.4", "reset", "DeepSpeed 0.19.4: fixed upstream, the patch changes nothing "
                                "(step mode still applies if chosen)"),
    "untested": ("9.0.0", None, "DeepSpeed 9.0.0: UNTESTED (newer than 0.19.8) - assumed fixed upstream, the patch "
                 "changes nothing (step mode still applies if chosen)"),
    "unsupported": ("0.8.3", "reset", "DeepSpeed 0.8.3: UNSUPPORTED (older than 0.9.0) - affected, and the patch "
                    "does nothing on it: upgrade DeepSpeed (0.15.3 fixes the first step, 0.19.4 every change the "
                    "patch backports)"),
    "bad-value": ("0.15.2", "rset", f"{ENV}='rset' is NOT ACCEPTED - a new process warns and patches nothing: set "
                  f"one of {settings.ACCEPTED}"),
    "bad-value (no deepspeed)": (None, "o f f", f"{ENV}='o f f' is NOT ACCEPTED - a new process warns and patches "
                                 f"nothing: set one of {settings.ACCEPTED}"),
    "affected-warn": ("0.15.2", "warn", f"DeepSpeed 0.15.2: AFFECTED ({ALL_THREE}) - patch in warn mode in new "
                      f"processes (through {ENV} + the .pth): they run unpatched and warn once per affected "
                      f"scheduler; set {ENV}=reset to fix them"),
    "no-deepspeed": (None, "reset", "DeepSpeed is not installed in this environment: nothing to patch (run doctor in "
                     "the environment the training job runs in)"),
}


@pytest.mark.parametrize("case", sorted(STATES))
def test_each_state_and_its_verdict_line(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    version, env, line = STATES[case]
    monkeypatch.delenv(ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(ENV, env)
    state, verdict = doctor_states.decide({"deepspeed": version}, _active(env))
    assert (state, verdict) == (case.split(" ")[0], line)
    assert state in doctor_states.STATES


@pytest.mark.parametrize(("scheduler", "params", "state", "says"), [
    ("OneCycle", {}, "not-affected", "not affected (OneCycle sets the lr when built, on every release)"),
    (None, {}, "not-affected", "not affected (no DeepSpeed scheduler in the config"),
    ("WarmupLR", {"warmup_max_lr": 1e-3}, "affected-not-active", "AFFECTED (WarmupLR) - "),
    ("WarmupCosineLR", {}, "affected-not-active", "AFFECTED (WarmupCosineLR) - "),
])
def test_with_a_config_only_its_scheduler_counts(scheduler: str | None, params: dict[str, Any], state: str,
                                                 says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    config = {"path": "/job/ds_config.json", "scheduler": scheduler, "params": params}
    got_state, line = doctor_states.decide({"deepspeed": "0.15.2"}, _active(None), config)
    assert got_state == state
    assert line.startswith(f"DeepSpeed 0.15.2, ds_config.json: {says}"), line


@pytest.mark.parametrize(("params", "state", "backports"), [
    ({"warmup_max_lr": 1e-3}, "fixed-upstream", None),  # a given peak never meets the default's change
    ({}, "backports-not-active", "default peak (#8171) to WarmupLR"),
])
def test_with_a_config_a_backport_counts_only_where_its_params_meet_it(params: dict[str, Any], state: str,
                                                                      backports: str | None,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    config = {"path": "ds_config.json", "scheduler": "WarmupLR", "params": params}
    got_state, line = doctor_states.decide({"deepspeed": "0.19.3"}, _active(None), config)
    assert got_state == state
    assert backports is None or f"the patch still backports {backports} - " in line, line


def test_strict_fails_exactly_where_the_mode_chosen_cannot_act_or_a_value_is_not_accepted() -> None:
    assert {state for state, fails in doctor_states.STATES.items() if fails} == {
        "bad-value", "unsupported", "affected-not-active", "backports-not-active"}


# docs/doctor.md's rule, a row per mode: (ACCELERATE_WARMUP_PATCH, armed in a new process, release, --strict fails)
STRICT_BY_MODE = [
    ("reset", True, "0.15.2", False), ("enabled", True, "0.15.2", False), ("step", True, "0.15.2", False),
    ("warn", True, "0.15.2", False),  # the roll-out's first step: an image built for it passes its check
    ("warn", True, "0.19.3", False),
    ("reset", False, "0.15.2", True), ("warn", False, "0.15.2", True),  # not reached (python -S, a --target folder)
    ("warn", False, "0.19.3", True),
    (None, False, "0.15.2", True), ("off", False, "0.15.2", True), ("0", False, "0.19.3", True),
    ("reset", True, "0.8.3", True), ("warn", True, "0.8.3", True),  # older than the table: nothing acts there
    ("rset", False, "0.15.2", True), ("rset", False, "0.19.8", True),
    (None, False, "0.19.8", False), ("off", False, "0.19.8", False), ("warn", True, "0.19.8", False),
]


@pytest.mark.parametrize(("env", "armed", "version", "fails"), STRICT_BY_MODE)
def test_strict_by_mode(env: str | None, armed: bool, version: str, fails: bool,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(ENV, env)
    active = _active(env)
    if not armed and active["active_at_start_up"]:  # the value would arm it, but the interpreter is not reached
        active.update(active_at_start_up=False, mode="not armed", through=[],
                      why_not="site.py does not run there, so no .pth and no sitecustomize is read")
    state, _ = doctor_states.decide({"deepspeed": version}, active)
    assert doctor_states.STATES[state] is fails, state


def test_doctor_claims_nothing_of_the_reference_for_onecycles_stair_counts_on_a_release_without_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    config = {"path": "/job/ds_config.json", "scheduler": "OneCycle", "params": {"cycle_first_stair_count": 2}}
    _, line = doctor_states.decide({"deepspeed": "0.15.2"}, _active(None), config)
    assert "stair counts (#8179), which the patch does not backport" in line, line
    _, line = doctor_states.decide({"deepspeed": "0.19.4"}, _active(None), config)
    assert "stair counts" not in line, line


def test_the_verdict_line_names_what_a_build_was_probed_to_lack_whatever_its_number(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A 0.19.4+<hash> built before #8142 and #8151 merged: the table says 0.19.4 lacks nothing, its classes lack
    two backported changes. The headline names them, as the per-class lines do (it said "the patch changes
    nothing" above them)."""
    monkeypatch.delenv(ENV, raising=False)
    probed = {"lacks": ["WarmupCosineLR ratio_past_warmup", "WarmupCosineLR unknown_warmup_type"]}
    state, line = doctor_states.decide({"deepspeed": "0.19.4+g1234567"}, _active(None), probed=probed)
    assert (state, line) == ("backports-not-active", "DeepSpeed 0.19.4+g1234567: fixed upstream; the patch still "
                             "backports ratio past warmup (#8142), unknown warmup type (#8151) to WarmupCosineLR - "
                             f"{NOT_ACTIVE}")
    fixed = doctor_states.decide({"deepspeed": "0.16.0"}, _active(None), probed={"lacks": []})
    assert fixed[0] == "fixed-upstream"  # a number that names an affected release, whose code lacks nothing
