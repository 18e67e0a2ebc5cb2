"""The audit's rule over generated run histories (#55 item 6; tests/histories.py says what a history is): real engines
of the installed DeepSpeed on CPU, in a child process per history (tests/children/history.py: the patch applied in
each engine's mode, or removed), the audit after every step, and the rule checked against each save's truth. A
failing history is shrunk and kept in tests/histories_found.json, which every run replays first.

Budget: CI runs ``AWP_HISTORIES`` histories (default 2) of ``AWP_HISTORY_STEPS`` steps (default 5) from the seed
``AWP_HISTORY_SEED`` (default 0): a patched start given its config by path, copied, its oldest save deleted, a job of
2 ranks under ZeRO 2, an edited config and a resume; with the kept examples (one of them plays each kind the search
draws) about 240 s on 0.15.2 and 265 s on 0.19.8, each with the other release's code beside it (noxfile.py; CI's
fresh-clone run on the development machine, 2026-12-07: the kept examples 219 s and 246 s, 13 of them, one with jobs
of the HF Trainer; 15 since, three with the Trainer's jobs).
``nox -s "histories(...)"`` runs a long search (200 histories of 8 steps, a seed from the clock unless given; its jobs
of up to ``AWP_HISTORY_RANKS`` ranks, 3 unless given; some runs saved as the HF Trainer does, ``checkpoint-N``, and
some jobs run through the Trainer itself, where ``AWP_HISTORY_TRAINER`` is 1, as the nox session sets it unless
given).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import histories
import pytest
from conftest import installed, run_child

installed("deepspeed")  # real engines: without DeepSpeed the module skips

FOUND = Path(__file__).parent / "histories_found.json"
COUNT = int(os.environ.get("AWP_HISTORIES", "2"))
LENGTH = int(os.environ.get("AWP_HISTORY_STEPS", "5"))
SEED = int(os.environ.get("AWP_HISTORY_SEED", "0"))


def _problems(steps: list[histories.Step], root: Path) -> list[str]:
    """Each break of the rule after each step of the history, played afresh under ``root`` in a child
    (tests/children/history.py: its engines' process group and port go with it)."""
    proc = run_child("history.py", json.dumps(steps), str(root))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return list(json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:]))


def _kept() -> list[dict[str, Any]]:
    return json.loads(FOUND.read_text()) if FOUND.exists() else []


def _needs_other_release(steps: list[histories.Step]) -> bool:
    return any(step.get("release") == "other" for step in steps)


def test_every_kept_history_keeps_the_rule(tmp_path: Path) -> None:
    unplayed = []
    for example, kept in enumerate(_kept()):
        if _needs_other_release(kept["steps"]) and "other" not in histories.releases_here():
            unplayed.append(example)
            continue
        assert _problems(kept["steps"], tmp_path / f"kept{example}") == [], kept
    if unplayed:
        pytest.skip(f"kept histories {unplayed} change the release and {histories.OTHER_DEEPSPEED} is not set "
                    "(noxfile.py sets it in the tests and histories sessions); "
                    "the others kept the rule")


@pytest.mark.parametrize("index", range(COUNT))
def test_generated_histories_keep_the_rule(index: int, tmp_path: Path) -> None:
    rng = random.Random(SEED * 100_003 + index)
    steps = histories.history(rng, LENGTH, histories.releases_here())
    problems = _problems(steps, tmp_path / "run")
    if not problems:
        return
    trials = iter(range(1_000))
    smallest = histories.shrunk(steps, lambda trial: bool(_problems(trial, tmp_path / f"shrink{next(trials)}")))
    shown = _problems(smallest, tmp_path / "shown")
    histories.keep(FOUND, smallest, shown)
    pytest.fail(f"the rule broke (kept in {FOUND.name}): {shown}\nhistory: {json.dumps(smallest)}")
