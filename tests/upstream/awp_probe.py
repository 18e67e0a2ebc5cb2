"""pytest plugin for run_upstream_suite.py (``-p awp_probe``): says in pytest's own process whether the
patch is active, in the report header (before any test) and in the terminal summary (after them)."""

from __future__ import annotations

import os
import sys


def _state() -> str:
    import torch
    from deepspeed.runtime.lr_schedules import WarmupLR

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    WarmupLR(opt, warmup_min_lr=0.0, warmup_max_lr=1.0, warmup_num_steps=10)
    text = (f"pid {os.getpid()} ACCELERATE_WARMUP_PATCH={os.environ.get('ACCELERATE_WARMUP_PATCH')!r}: "
            f"WarmupLR(min 0, max 1) leaves the optimizer's lr at {opt.param_groups[0]['lr']}")
    if "accelerate_warmup_patch" not in sys.modules:
        return text + "; accelerate_warmup_patch not imported"
    import accelerate_warmup_patch

    status = accelerate_warmup_patch.status()
    return text + f"; status: mode={status.get('mode')} patched={status.get('patched')} " \
                  f"fixes_applied={status.get('fixes_applied')}"


def pytest_report_header(config):
    return "awp_probe: " + _state()


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line("awp_probe at the end: " + _state())
