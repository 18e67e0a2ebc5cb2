"""The command line each real DeepSpeed multi-node runner builds, as JSON on stdout.

    python multinode_cmds.py HOSTFILE [--direct] [--fault]

Runs in a fresh interpreter so that the environment alone decides what is armed (the installed
.pth). ``--direct`` calls ``launcher.patch_runners`` itself, as the post-import hook would;
``--fault`` makes the table lookup fail (fault injection), once without and once with strict mode.
Every runner class the guard table lists for the installed release is built with the real
arguments ``deepspeed --hostfile HOSTFILE --launcher NAME`` parses to, and its real ``get_cmd`` runs.
"""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from typing import Any


def build(runner_module: Any, launcher_module: Any, hostfile: str, launcher: str, runner: str) -> list[str]:
    args = launcher_module.parse_args(["--hostfile", hostfile, "--launcher", launcher, "--master_addr", "127.0.0.1",
                                       "--master_port", "29760", "train.py", "--lr", "0.1"])
    pool = launcher_module.fetch_hostfile(args.hostfile)
    active = launcher_module.parse_inclusion_exclusion(pool, args.include, args.exclude)
    world_info = launcher_module.encode_world_info(active)
    cls = getattr(runner_module, runner)
    instance = cls(args, world_info) if runner == "PDSHRunner" else cls(args, world_info, pool)
    built = instance.get_cmd(dict(os.environ), active)
    return list(built[0] if runner == "PDSHRunner" else built)  # pdsh: (cmd, kill_cmd[, env])


def main() -> int:
    hostfile = sys.argv[1]
    from deepspeed.launcher import multinode_runner, runner as launcher_module

    from accelerate_warmup_patch import multinode_runners

    if "--direct" in sys.argv:
        from accelerate_warmup_patch import launcher

        launcher.patch_runners(multinode_runner)
    facts = multinode_runners.runner_facts(metadata.version("deepspeed"))
    if "--fault" in sys.argv:
        def broken(*args: object) -> None:
            raise RuntimeError("injected")

        multinode_runners.runner_fact = broken  # type: ignore[assignment]
        out: dict[str, Any] = {"open": build(multinode_runner, launcher_module, hostfile, "pdsh", "PDSHRunner")}
        os.environ["ACCELERATE_WARMUP_PATCH_STRICT"] = "1"
        try:
            build(multinode_runner, launcher_module, hostfile, "pdsh", "PDSHRunner")
            out["strict"] = "built"
        except Exception as error:
            out["strict"] = f"{type(error).__name__}: {error}"
        print(json.dumps(out))
        return 0
    print(json.dumps({f.subject: build(multinode_runner, launcher_module, hostfile, f.value.launcher, f.subject)
                      for f in facts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
