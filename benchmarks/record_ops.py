"""What the record adds to a save in file-system operations and time, record on and off side by side in one job (#56).

    python benchmarks/record_ops.py [--ranks 1|2] [--tensors 4] [--saves 6] [--delay-ms 2 10]

A real DeepSpeed job on CPU (gloo; ZeRO 0 on one rank, ZeRO 1 on two, launched by torchrun), armed (reset), trains one
step, then saves ``--saves`` times into new tags, the record on and off alternately
(ACCELERATE_WARMUP_PATCH_RECORD, read at each save). Run twice: once under ``strace -f -y`` (every system call on a
file descriptor or a path, by every thread of every rank), counting per save the calls that touch the save folder
(the checkpoint's file system: what a parallel file system pays a metadata or data round trip for) and among them the
opens of a states file for reading (each one read of a zip directory); once without strace, timing each save. The
added time at a per-operation delay is modelled as added operations times the delay (no FUSE mount here). Prints
medians per save, record on minus off, and what each save's added calls were. No goal is asserted.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

MARK = "/awp-record-ops-mark"  # a stat of this path (it never exists) marks a save's begin and end in the trace


def job(out: str, tensors: int, saves: int, zero: int) -> None:
    """The job itself (one rank): train one step, then save ``saves`` times, record on and off alternately."""
    import deepspeed
    import torch

    deepspeed.init_distributed(dist_backend="gloo")
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(max(1, tensors // 2))))
    config = {"train_micro_batch_size_per_gpu": 1, "steps_per_print": 10_000,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                                           "warmup_num_steps": 5}},
              "zero_optimization": {"stage": zero}}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    engine.backward(engine(torch.randn(1, 2)).sum())
    engine.step()
    times: list[tuple[str, float]] = []
    for index in range(saves):
        on = "on" if index % 2 == 0 else "off"
        os.environ["ACCELERATE_WARMUP_PATCH_RECORD"] = on
        torch.distributed.barrier()
        os.path.exists(f"{MARK}/{rank}/{index}/{on}/begin")
        began = time.perf_counter()
        engine.save_checkpoint(out, tag=f"save{index}")
        times.append((on, time.perf_counter() - began))
        os.path.exists(f"{MARK}/{rank}/{index}/{on}/end")
    with open(os.path.join(out, f"times{rank}.json"), "w") as handle:
        json.dump(times, handle)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def _command(args: argparse.Namespace, out: str) -> list[str]:
    me = [os.path.abspath(__file__), "--job", out, "--tensors", str(args.tensors), "--saves", str(args.saves),
          "--zero", "0" if args.ranks == 1 else "1"]
    if args.ranks == 1:
        return [sys.executable, *me]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.ranks), "--master_port",
            str(args.port), *me]


def _env(args: argparse.Namespace) -> dict[str, str]:
    env = {**os.environ, "ACCELERATE_WARMUP_PATCH": "reset"}
    if args.ranks == 1:
        env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(args.port)})
    return env


@dataclass
class Save:
    """One save's calls on the save folder, as the trace shows them."""

    record: str  # "on" or "off"
    ops: int = 0
    zip_reads: int = 0
    calls: collections.Counter[str] = field(default_factory=collections.Counter)


def counted(trace: str, out: str) -> dict[int, Save]:
    """Per save: "on"/"off", the calls touching ``out`` between its first begin and its last end mark (every rank's),
    the opens of a states file for reading, and each call's name with its count."""
    windows: dict[int, list[int]] = {}
    state: dict[int, str] = {}
    lines = Path(trace).read_text(errors="replace").splitlines()
    mark = re.compile(re.escape(MARK) + r"/(\d+)/(\d+)/(on|off)/(begin|end)")
    for number, line in enumerate(lines):
        found = mark.search(line)
        if found:
            index = int(found.group(2))
            state[index] = found.group(3)
            bounds = windows.setdefault(index, [number, number])
            bounds[0], bounds[1] = min(bounds[0], number), max(bounds[1], number)
    result: dict[int, Save] = {}
    call = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\(")
    for index, (first, last) in sorted(windows.items()):
        save = result[index] = Save(state[index])
        for line in lines[first:last + 1]:
            match = call.search(line)
            if out not in line or MARK in line or ("resumed>" in line and "<..." in line) or not match:
                continue
            save.calls[match.group(1)] += 1
            save.ops += 1
            if match.group(1) in ("openat", "open") and "_states.pt" in line and "O_RDONLY" in line:
                save.zip_reads += 1
    return result


def store_cost(world_sizes: list[int], rounds: int) -> None:
    """Each rank's word and the writer's read of them all, through a real TCPStore on 127.0.0.1 (one client per
    simulated rank would need as many processes: the ranks' tells are made from one client here, and the writer's
    read is what it is at that size). Prints, per world size, the median time of one rank's tell and of the writer's
    read of every word, and the store calls of each."""
    import datetime
    import socket

    import torch.distributed as dist

    from accelerate_warmup_patch import attest, bounded

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = dist.TCPStore("127.0.0.1", port, 1, True, timeout=datetime.timedelta(seconds=30))
    for size in world_sizes:
        tells, reads = [], []
        for round_ in range(rounds):
            save = f"save{round_}"
            for rank in range(1, size):
                began = time.perf_counter()
                attest.tell(server, bounded.Budget(), rank, attest.Word(save, "reset", "as 0.19.8 runs it"))
                tells.append(time.perf_counter() - began)
            began = time.perf_counter()
            why = attest.unheard(server, bounded.Budget(), world_size=size, own_rank=0,
                                 own=attest.Word(save, "reset", "as 0.19.8 runs it"))
            reads.append(time.perf_counter() - began)
            assert why is None, why
        print(f"  {size} ranks: a rank's tell {_median(tells) * 1e3:.2f} ms (a set and a check, one bounded call); "
              f"the writer's read of {size - 1} words {_median(reads) * 1e3:.2f} ms (a check and a multi_get, one "
              "bounded call)")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--tensors", type=int, default=4)
    parser.add_argument("--saves", type=int, default=6)
    parser.add_argument("--zero", type=int, default=0)
    parser.add_argument("--port", type=int, default=int(os.environ.get("AWP_PORT_BASE", "29740")) + 54)
    parser.add_argument("--delay-ms", type=float, nargs="*", default=[2.0, 10.0])
    parser.add_argument("--store-ranks", type=int, nargs="*", help="only the store's cost at these world sizes")
    args = parser.parse_args()
    if args.job:
        job(args.job, args.tensors, args.saves, args.zero)
        return
    if args.store_ranks:
        store_cost(args.store_ranks, rounds=7)
        return
    if shutil.which("strace") is None:
        sys.exit("strace is not installed: apt-get install strace")
    work = tempfile.mkdtemp(prefix="record-ops-")
    traced, timed = os.path.join(work, "traced"), os.path.join(work, "timed")
    trace = os.path.join(work, "trace.txt")
    subprocess.run(["strace", "-f", "-y", "-qq", "-e", "trace=%file,%desc", "-o", trace, *_command(args, traced)],
                   env=_env(args), check=True, capture_output=True)
    subprocess.run(_command(args, timed), env=_env(args), check=True, capture_output=True)
    per_save = counted(trace, traced)
    times = [json.loads(Path(timed, f"times{rank}.json").read_text()) for rank in range(args.ranks)]
    by = {kind: [save for save in per_save.values() if save.record == kind] for kind in ("on", "off")}
    ops = {kind: _median([float(save.ops) for save in saves]) for kind, saves in by.items()}
    reads = {kind: _median([float(save.zip_reads) for save in saves]) for kind, saves in by.items()}
    wall = {kind: _median([max(each[index][1] for each in times) for index in range(args.saves)
                           if times[0][index][0] == kind]) for kind in ("on", "off")}
    added = ops["on"] - ops["off"]
    print(f"ranks {args.ranks}, tensors {args.tensors}, saves {args.saves} (medians a save, all ranks together)")
    print(f"  file-system calls on the save folder: off {ops['off']:g}, on {ops['on']:g}: added {added:g}")
    print(f"  opens of a states file for reading (zip directory reads): off {reads['off']:g}, on {reads['on']:g}")
    print(f"  wall time a save (no strace): off {wall['off'] * 1e3:.1f} ms, on {wall['on'] * 1e3:.1f} ms: "
          f"added {(wall['on'] - wall['off']) * 1e3:.1f} ms")
    for delay in args.delay_ms:
        print(f"  modelled at {delay:g} ms an operation: added {added * delay:.0f} ms a save")
    on, off = by["on"][0].calls, by["off"][0].calls
    extra = sorted((name, on[name] - off[name]) for name in set(on) | set(off) if on[name] != off[name])
    print("  added calls of one save:", ", ".join(f"{name} {count:+d}" for name, count in extra))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
