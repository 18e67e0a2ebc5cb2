"""Audit v5 (#55 items 2-5) on real engines of the installed DeepSpeed (the suite's 0.15.2 and 0.19.8): the ordinary
shapes of a run (tests/children/audit_shapes.py: a config given as an absolute or a relative path and edited after
the run, a scheduler built in code or by a callable, a torch scheduler, a GAN's two engines with alike names under
custom tags, bf16, gradient accumulation, frozen parameters, ZeRO 1-3), trained once armed (reset) and once not, then
audited from ``python -S`` with a copy of the package alone. The truth is the lr each engine's first optimizer step
used (a torch pre-hook), against 0.19.8's step 0 for the same schedule (warmup_min_lr 0.0; OneCycle's cycle_min_lr; a
torch scheduler's own lr on every release).

The rule, checked for every run: never "not affected" where step 0 ran at another lr than 0.19.8's, never "affected"
where it ran at 0.19.8's, and every honest patched shape "not affected" (an unpatched one on a release that needs
nothing: "not affected", or "unknown" only because no record says which release ran step 0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ports
import pytest
from conftest import CHILDREN, bare_audit, cleared_or_unseen, installed

installed("deepspeed")  # real engines: without DeepSpeed the module skips (tests/unit judges synthetic files)

# 0.19.8's step 0 for each shape's schedule (the critic's OneCycle starts at cycle_min_lr on every release)
PLAIN = ("bf16", "accumulation", "frozen", "zero1", "zero2", "zero3")  # a WarmupLR in the saved config
REFERENCE = {"path-absolute": [0.0], "path-relative": [0.0], "code": [0.0], "callable": [0.0],
             "gan-generator": [0.0], "gan-critic": [1e-4], **{name: [0.0] for name in PLAIN}}
# where the checkpoint holds the schedule (the others hold a path, or no scheduler block): an unpatched run that
# differs from 0.19.8 is proven "affected" there, and "unknown" is the most the others can say
CONFIG_SAVED = ("gan-generator", "gan-critic", *PLAIN)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, list[float]]]]:
    """Every shape trained by two processes at once, one armed (reset) and one not; their first steps' lrs."""
    root = tmp_path_factory.mktemp("shapes")
    procs = {}
    for arm, mode, port in (("patched", "reset", ports.ONE_RANK), ("unpatched", "", ports.AUDIT_SHAPES)):
        env = {**os.environ, "ACCELERATE_WARMUP_PATCH": mode, "MASTER_PORT": str(ports.port(port))}
        procs[arm] = subprocess.Popen([sys.executable, str(CHILDREN / "audit_shapes.py"), str(root / arm)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      cwd=CHILDREN.parent)
    first = {}
    for arm, proc in procs.items():
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        first[arm] = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    return root, first


@pytest.fixture(scope="module")
def audited(trained: tuple[Path, dict[str, dict[str, list[float]]]],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each arm's reports by shape ("gan-generator" for the gan folder's generator engine)."""
    root, _ = trained
    audit = bare_audit(tmp_path_factory.mktemp("bare"))
    reports = {}
    for arm in ("patched", "unpatched"):
        proc = audit("-m", "accelerate_warmup_patch", "audit", "--json", str(root / arm))
        assert proc.returncode in (0, 1), proc.stderr
        for report in json.loads(proc.stdout):
            name = Path(report["path"]).name + (f"-{report['engine']}" if report["engine"] else "")
            reports[f"{arm}/{name}"] = report
    return reports


def _truth(trained: tuple[Path, dict[str, dict[str, list[float]]]], key: str) -> tuple[list[float], list[float]]:
    arm, name = key.split("/")
    ran = trained[1][arm][name]
    return ran, REFERENCE.get(name, ran)  # a torch scheduler's step 0 is its own on every release


def test_every_shape_is_judged_by_the_rule_against_each_runs_truth(trained, audited) -> None:
    assert len(audited) == 26, sorted(audited)  # 13 shapes (the gan's two engines apart) per arm
    for key, report in audited.items():
        ran, reference = _truth(trained, key)
        same = ran == pytest.approx(reference, abs=1e-12)
        if same and key.startswith("patched/"):
            assert report["verdict"] == "not affected", (key, ran, report["why"])
        elif same:  # no record: unknown only where no record says which release ran step 0
            assert cleared_or_unseen(report), (key, ran, report["why"])
        else:
            assert report["verdict"] != "not affected", (key, ran, report["why"])
            expected = "affected" if key.split("/")[1] in CONFIG_SAVED else "unknown"
            assert report["verdict"] == expected, (key, ran, report["why"])


def test_every_honest_patched_shape_is_not_affected(audited) -> None:
    patched = {key: r["verdict"] for key, r in audited.items() if key.startswith("patched/")}
    assert set(patched.values()) == {"not affected"}, patched


def _saved_config(run: Path) -> Any:
    import torch

    return torch.load(next(run.rglob("mp_rank_00_model_states.pt")), map_location="cpu",
                      weights_only=False)["ds_config"]


def test_a_config_file_edited_after_the_run_never_clears_it(trained, audited) -> None:
    # today's file starts the warmup at the optimizer's lr: read alone, an unpatched 0.15.2 run would be cleared
    root, _ = trained
    for name in ("path-absolute", "path-relative"):
        report = audited[f"unpatched/{name}"]
        if report["verdict"] != "not affected":  # a release that needs nothing clears it without the file
            assert report["verdict"] == "unknown", report
    # the save holds the path where deepspeed.initialize handed it to the engine as given (before 0.19.0), else the
    # config it loaded from the file (load_ds_config): the file is read, and named, only in the first case
    path = root / "unpatched" / "configs" / "ds_config.json"
    held = _saved_config(root / "unpatched" / "path-absolute")
    assert held == str(path) or isinstance(held, dict), held
    assert audited["unpatched/path-absolute"]["config_files"] == ([str(path)] if isinstance(held, str) else [])


def test_a_torch_scheduler_is_not_affected_with_that_reason(audited) -> None:
    for arm in ("patched", "unpatched"):
        report = audited[f"{arm}/torch"]
        assert report["verdict"] == "not affected" and "not one of DeepSpeed's" in report["why"], report


def test_two_engines_with_alike_names_in_one_folder_are_two(trained, audited) -> None:
    # both nn.Sequential: their names coincide, their shapes do not; each judged against its own schedule
    assert audited["patched/gan-critic"]["verdict"] == "not affected", audited["patched/gan-critic"]
    assert cleared_or_unseen(audited["unpatched/gan-critic"]), audited["unpatched/gan-critic"]


def test_a_folder_of_symlinked_runs_says_so_and_does_not_exit_0(trained, tmp_path) -> None:
    root, _ = trained
    links = tmp_path / "links"
    links.mkdir()
    for name in ("gan", "code"):
        os.symlink(root / "unpatched" / name, links / name)
    proc = subprocess.run([sys.executable, "-m", "accelerate_warmup_patch", "audit", str(links)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc
    assert "skipped: 2 symlinked folders not followed" in proc.stdout, proc.stdout
    assert "nothing was judged" in proc.stdout.splitlines()[-1], proc.stdout
