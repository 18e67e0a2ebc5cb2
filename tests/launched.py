"""One rank of a real multi-process launch (torchrun, accelerate launch, deepspeed, mpirun, srun).

Trains the demo model on this rank and writes its lrs to ``$AWP_LAUNCH_OUT/rank<r>.json``. Activation comes from the
environment the launcher passes down (ACCELERATE_WARMUP_PATCH and the installed .pth), so the
script itself never imports the package. ``--accelerate`` trains through accelerate's Accelerator.

Each rank also writes ``env-rank<r>.json``: the switch it received, its node (``CROSS_RANK``, set by
DeepSpeed's pdsh launch) and host name, whether ssh started it, and how the package was armed in it. Under mpirun
and srun the rank comes from the MPI or Slurm variables until DeepSpeed sets ``RANK`` (its
``mpi_discovery``, through mpi4py, on the port in ``MASTER_PORT``).
``--env-only`` writes just that (nothing imported, nothing wrapped) and does not train. ``--node-local-save`` saves
a checkpoint with ``checkpoint.use_node_local_storage`` into ``$AWP_LAUNCH_OUT/node<CROSS_RANK>``: each node's folder
of its own, as node-local disks are.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import rank_end  # beside this script: sys.path[0]
import torch


def _rows_deepspeed() -> list[list[float | None]]:
    import deepspeed

    # ranks that mpirun or srun started find their rank through mpi4py, on this port (29500 otherwise)
    deepspeed.init_distributed(dist_backend="gloo", distributed_port=int(os.environ.get("MASTER_PORT", "29500")))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    config = _config()
    node_local = "--node-local-save" in sys.argv
    if node_local:
        config["checkpoint"] = {"use_node_local_storage": True}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()), config=config)
    rows = []
    for _ in range(4):
        loss = engine(torch.randn(2, 4)).pow(2).mean()
        engine.backward(loss)
        rows.append([float(g["lr"]) for g in engine.optimizer.param_groups])  # what step() will use
        engine.step()
    if node_local:
        engine.save_checkpoint(os.path.join(os.environ["AWP_LAUNCH_OUT"], f"node{os.environ['CROSS_RANK']}"),
                               tag="ckpt")
    return rows


def _rows_accelerate() -> list[list[float | None]]:
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=_config()))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    optimizer = DummyOptim(list(model.parameters()), lr=1e-3)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, DummyScheduler(optimizer))
    rows = []
    for _ in range(4):
        loss = model(torch.randn(2, 4)).pow(2).mean()
        rows.append([float(g["lr"]) for g in model.optimizer.param_groups])
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return rows


def _config() -> dict[str, object]:
    return {
        "train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                                      "warmup_num_steps": 5, "warmup_type": "linear"}},
        "zero_optimization": {"stage": 2},
        "steps_per_print": 10_000,
    }


def _rank() -> str:
    """This rank's number: set by torchrun and DeepSpeed's launchers, else by mpirun (Open MPI, MPICH) or srun."""
    names = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
    return next(os.environ[name] for name in names if name in os.environ)


def _seen() -> dict[str, object]:
    package = sys.modules.get("accelerate_warmup_patch")  # imported by the .pth, never by this script
    return {
        "rank": _rank(),
        "node": os.environ.get("CROSS_RANK"),
        "host": socket.gethostname(),
        "ssh": "SSH_CONNECTION" in os.environ,
        "ACCELERATE_WARMUP_PATCH": os.environ.get("ACCELERATE_WARMUP_PATCH"),
        "AWP_INJECTED": os.environ.get("AWP_INJECTED"),  # what a value that splits a runner's list would add
        "armed": {k: v for k, v in package.status().items() if k in ("mode", "applied_by")} if package else None,
    }


def main() -> int:
    out = os.environ["AWP_LAUNCH_OUT"]  # a file per rank: launchers interleave their ranks' stdout
    if "--env-only" in sys.argv:
        with open(os.path.join(out, f"env-rank{_rank()}.json"), "w") as file:
            json.dump(_seen(), file)
        return 0
    rows = _rows_accelerate() if "--accelerate" in sys.argv else _rows_deepspeed()
    with open(os.path.join(out, f"env-rank{os.environ['RANK']}.json"), "w") as file:
        json.dump(_seen(), file)
    with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w") as file:
        json.dump(rows, file)
    rank_end.end_rank()  # CPU DeepSpeed can abort in the interpreter's teardown (tests/rank_end.py)
    return 0


if __name__ == "__main__":
    sys.exit(main())
