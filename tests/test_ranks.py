"""A job is all its ranks (#55 item 1), on real engines of the installed DeepSpeed (the suite's 0.15.2 and 0.19.8).

One torchrun job of two CPU ranks: rank 0 armed (reset), rank 1 not armed, armed in warn mode, or armed as rank 0,
under ZeRO 0 (rank 1 writes no states file) and ZeRO 2 (rank 1 writes its optimizer partition). The truth is the lr
each rank's own optimizer used at its first step (a torch pre-hook); the record is bound only where every rank told
its writer that it ran as rank 0 ran, and `audit` never says "not affected" where a rank's step 0 ran at another lr
than 0.19.8's (warmup_min_lr, 0.0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import ports
import pytest
from conftest import CHILDREN, bare_audit

RECORD = "accelerate_warmup_patch.json"
REFERENCE_STEP0 = 0.0  # WarmupLR-linear's warmup_min_lr: what 0.19.8 runs step 0 at
CASES = ("zero0-unarmed", "zero0-warn", "zero2-unarmed", "zero2-warn", "zero2-armed")


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The two-rank job run once: each case's record, audit report, and each rank's true lrs."""
    out = tmp_path_factory.mktemp("ranks")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(ports.port(ports.RANKS_JOB)), str(CHILDREN / "ranks_attest.py"), str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    truth = [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    records = {case: json.loads((out / case / "ckpt" / RECORD).read_text()) for case in CASES}
    audit = bare_audit(tmp_path_factory.mktemp("bare"))("-m", "accelerate_warmup_patch", "audit", "--json",
                                                         *(str(out / case) for case in CASES))
    reports = dict(zip(CASES, json.loads(audit.stdout)))
    return records, reports, {case: [truth[0][case], truth[1][case]] for case in CASES}


@pytest.mark.parametrize("case", [case for case in CASES if case.endswith("-unarmed")])
def test_a_rank_that_told_nothing_leaves_the_record_unbound_saying_which(job, case):
    records, reports, truth = job
    bound = records[case]["bound_to"]
    assert bound["file"] is None and bound["unbound"].startswith("rank 1 of 2 told nothing"), bound
    assert records[case]["ranks"] == 2, records[case]
    if truth[case][1][0] != REFERENCE_STEP0:  # the release needs the fix: rank 1 ran its step 0 unfixed
        assert reports[case]["verdict"] != "not affected", (truth[case], reports[case])


@pytest.mark.parametrize("case", [case for case in CASES if case.endswith("-warn")])
def test_a_rank_in_another_mode_binds_the_record_only_where_it_ran_as_the_reference(job, case):
    records, reports, truth = job
    bound = records[case]["bound_to"]
    if truth[case][1][0] == REFERENCE_STEP0:  # a release that needs no fix: warn changed nothing, every rank agrees
        assert bound["file"] is not None and reports[case]["verdict"] == "not affected", (bound, reports[case])
        return
    assert bound["file"] is None and bound["unbound"].startswith("rank 1 of 2 (mode warn) says its first optimizer "
                                                                 "step ran not as"), bound
    assert reports[case]["verdict"] != "not affected", (truth[case], reports[case])


def test_every_rank_armed_binds_the_record_of_both_ranks(job):
    records, reports, truth = job
    assert truth["zero2-armed"][0][0] == truth["zero2-armed"][1][0] == REFERENCE_STEP0, truth["zero2-armed"]
    bound = records["zero2-armed"]["bound_to"]
    assert bound["file"] == "mp_rank_00_model_states.pt" and bound["others"]["files"] == 2, bound
    assert reports["zero2-armed"]["verdict"] == "not affected", reports["zero2-armed"]


def test_no_rank_ran_unfixed_where_the_audit_says_not_affected(job):
    _, reports, truth = job
    for case in CASES:
        if reports[case]["verdict"] == "not affected":
            assert all(lrs[0] == REFERENCE_STEP0 for lrs in truth[case]), (case, truth[case], reports[case])
