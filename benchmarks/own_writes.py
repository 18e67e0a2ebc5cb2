"""What the record's race check adds to a save, against the save's own torch.save of the same file.

    python benchmarks/own_writes.py [--megabytes 300] [--tensors 75] [--rounds 7]

One process writes a states file of ``--megabytes`` in ``--tensors`` tensors with torch.save, as DeepSpeed's
TorchCheckpointEngine does, then what a rank other than the record's writer adds to that save when it is watched
(own_writes.py, after the original: its zip central directory read back, a ``set`` and a ``check`` through a real
TCPStore on 127.0.0.1, as torch.distributed's default store of a job), then the writer's check of the folder (its
read-back, then a ``check``, a ``get`` and a ``delete_key``). Each round times the three side by side;
the medians and each one's ratio to the plain torch.save are printed. No goal is asserted: the machine is shared.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

from accelerate_warmup_patch import binding, own_writes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=300)
    parser.add_argument("--tensors", type=int, default=75)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    state = {f"layer{i}": torch.randn(args.megabytes * 2**20 // 4 // args.tensors) for i in range(args.tensors)}
    port = _free_port()
    server = dist.TCPStore("127.0.0.1", port, 2, True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False)
    rank = dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=30))
    times: dict[str, list[float]] = {"torch.save": [], "watched": [], "writer": []}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
        model_states = os.path.join(folder, "mp_rank_00_model_states.pt")  # the writer's own, noted below
        torch.save({"module": {"weight": torch.zeros(4)}}, model_states)
        for _ in range(args.rounds):
            start = time.perf_counter()
            torch.save(state, path)
            saved = time.perf_counter()
            with own_writes.saving(own_writes.SaveNotes(False, rank)):  # rank 1 after its save: read back and told
                own_writes.own_write_wrapper(lambda obj, where: None, None, (state, path), {})
            watched = time.perf_counter()
            writer = own_writes.SaveNotes(True, server)
            writer.writes[model_states] = binding.file_stamp(model_states)
            done = time.perf_counter()  # rank 0: reads the folder back, and asks
            why = own_writes.rewritten_since(folder, writer, binding.read_back(folder)[1])
            asked = time.perf_counter()
            assert why is None, why
            for name, seconds in zip(times, (saved - start, watched - saved, asked - done)):
                times[name].append(seconds)
    save = statistics.median(times["torch.save"])
    print(f"a states file of {args.megabytes} MB in {args.tensors} tensors, {args.rounds} rounds, medians:")
    for name, label in (("torch.save", "torch.save alone"), ("watched", "rank 1: read back, told"),
                        ("writer", "rank 0: read back, asked")):
        median = statistics.median(times[name])
        print(f"  {label:<38} {median * 1e3:9.3f} ms  {median / save:8.5f} x torch.save")

if __name__ == "__main__":
    main()
