"""``audit`` of fleets: CPU per run against a bare reader, peak RSS, time to the first line, file-system calls per
run, ``--jobs 2`` against one process, and requests and bytes per run against a local S3 server, side by side.

    python benchmarks/audit_fleet.py --source DIR [--runs 1000,10000] [--folder DIR] [--s3-runs 200] [--no-strace]

``--source`` is a folder of real runs (DeepSpeed save folders and HF Trainer outputs, as tests/harness.py writes
them: ``tests/test_audit_store.py``'s, or ``python benchmarks/audit_fleet.py --train DIR`` in a venv with
DeepSpeed). Each fleet is built from them by hard links in the layouts an admin meets: raw save folders, Trainer
outputs with ``checkpoint-N/global_stepN``, and runs nested in a project folder with ``wandb/`` and ``hf_export/``
beside them. Every figure comes from a child ``python -S`` (no site-packages: no torch), its CPU time and peak RSS
from ``os.wait4`` of that child alone; the bare reader (a walk, ``zipfile`` and a permissive unpickler of the
same data.pkl) runs on the same fleet in the same run. File-system calls are counted by ``strace -f -c`` (file and
descriptor calls); S3 requests by moto's own recorder. Measurements, not assertions: docs/benchmarks.md keeps them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BARE_READER = r"""
import io, os, pickle, sys, zipfile
class Anything(dict):
    def __init__(self, *args, **kwargs): pass
    def __setstate__(self, state): pass
    def __call__(self, *args, **kwargs): return Anything()
    def append(self, value): pass
    def extend(self, values): pass
class Permissive(pickle.Unpickler):
    def find_class(self, module, name): return Anything
    def persistent_load(self, pid): return None
for folder, _, names in os.walk(sys.argv[1]):
    for name in names:
        if name.endswith("model_states.pt"):
            with zipfile.ZipFile(os.path.join(folder, name)) as archive:
                member = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
                Permissive(io.BytesIO(archive.read(member))).load()
"""
FS_CALLS = ("openat", "open", "newfstatat", "fstat", "stat", "lstat", "statx", "getdents64", "read", "pread64",
            "lseek", "close", "readlink", "access")


def train(folder: str) -> None:
    """Real runs for --source, trained with tests/harness.py (needs torch and DeepSpeed in this interpreter)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from harness import Spec, run_specs

    run_specs(Spec(scheduler="WarmupLR-linear", save_to=f"{folder}/ds-z0"),
              Spec(scheduler="WarmupDecayLR", zero=2, groups=[1e-3, 5e-4], save_to=f"{folder}/ds-z2-2groups"),
              Spec(path="trainer", scheduler="WarmupDecayLR", save_to=f"{folder}/trainer"),
              Spec(scheduler="WarmupLR-linear", patch="before", mode="reset", save_to=f"{folder}/patched"))


def _link_tree(source: Path, target: Path) -> None:
    for folder, _, names in os.walk(source):
        into = target / os.path.relpath(folder, source)
        into.mkdir(parents=True, exist_ok=True)
        for name in names:
            os.link(os.path.join(folder, name), into / name)


def build_fleet(source: Path, target: Path, runs: int) -> None:
    """``runs`` runs hard-linked from the source runs, a third each raw, in a project with wandb/ and hf_export/
    beside the run, or as they came (Trainer outputs stay Trainer outputs), 100 to a folder."""
    kinds = sorted(p for p in source.iterdir() if p.is_dir())
    wandb = target / ".wandb-files"
    wandb.mkdir(parents=True)
    for name in ("run.log", "config.yaml", "output.log"):
        (wandb / name).write_text("x" * 100)
    for index in range(runs):
        kind = kinds[index % len(kinds)]
        group = target / f"group{index // 100:04d}"
        if index % 3 == 1:  # nested in a project, beside what a training job leaves
            project = group / f"project{index:06d}"
            _link_tree(kind, project / "checkpoints")
            _link_tree(wandb, project / "wandb" / f"run-{index}" / "files")
            _link_tree(wandb, project / "hf_export")
        else:
            _link_tree(kind, group / f"{kind.name}-{index:06d}")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def measure(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Wall and CPU seconds, peak RSS (MiB), seconds to the first report on stdout, report lines, exit status."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env or _env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            cwd=tempfile.gettempdir())
    assert proc.stdout is not None
    first = None
    lines = 0
    for line in proc.stdout:
        if line.startswith(b'{"audit_part"'):  # a --jsonl part's opening and closing lines: not a run's
            continue
        lines += 1
        if first is None:
            first = time.perf_counter() - started
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall": time.perf_counter() - started, "cpu": usage.ru_utime + usage.ru_stime,
            "rss": usage.ru_maxrss / 1024, "first": first, "lines": lines, "code": proc.returncode}


def fs_calls(argv: list[str]) -> int | None:
    """File-system and descriptor calls of a child, from strace's summary; None without strace."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        subprocess.run([strace, "-f", "-c", "-o", out.name, *argv], env=_env(), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, cwd=tempfile.gettempdir(), check=False)
        total = 0
        for line in out.read().splitlines():
            fields = line.split()
            if len(fields) >= 5 and fields[-1] in FS_CALLS and fields[3].isdigit():
                total += int(fields[3])
        return total


def audit(*args: str) -> list[str]:
    return [sys.executable, "-S", "-m", "accelerate_warmup_patch", "audit", *args]


def s3_figures(source: Path, runs: int) -> dict[str, Any] | None:
    """Requests and bytes per run of ``audit --jsonl s3://...`` against moto's server on 127.0.0.1."""
    # moto's recorder writes its file where it is told when imported (else into the working directory)
    os.environ.setdefault("MOTO_RECORDER_FILEPATH", os.path.join(tempfile.gettempdir(), f"awp-moto-{os.getpid()}"))
    try:
        import logging

        import s3fs
        from moto.server import ThreadedMotoServer
    except ImportError:
        return None
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{server._server.server_port}"
    env = {**_env(), "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": endpoint, "AWS_EC2_METADATA_DISABLED": "true", "NO_PROXY": "127.0.0.1",
           "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    try:
        with tempfile.TemporaryDirectory(prefix="awp-s3-fleet-") as folder:
            build_fleet(source, Path(folder) / "fleet", runs)
            fs = s3fs.S3FileSystem(key="bench", secret="bench", endpoint_url=endpoint)
            fs.mkdir("fleet")
            fs.put(str(Path(folder) / "fleet"), "fleet/runs", recursive=True)
            recorder = f"{endpoint}/moto-api/recorder/"
            for action in ("reset-recording", "start-recording"):
                urllib.request.urlopen(urllib.request.Request(recorder + action, method="POST")).read()
            figures = measure([sys.executable, "-m", "accelerate_warmup_patch", "audit", "--jsonl", "s3://fleet/runs"],
                              env)
            urllib.request.urlopen(urllib.request.Request(recorder + "stop-recording", method="POST")).read()
            recording = urllib.request.urlopen(recorder + "download-recording").read().decode().splitlines()
    finally:
        server.stop()
    requests = [json.loads(line) for line in recording]
    ranged = 0
    for request in requests:
        span = (request.get("headers") or {}).get("Range", "")
        if span.startswith("bytes="):
            start, _, end = span[6:].partition("-")
            ranged += int(end) - int(start) + 1
    lists = sum(1 for r in requests if "list-type=2" in r.get("url", ""))
    return {**figures, "runs": figures["lines"], "requests": len(requests) / max(figures["lines"], 1),
            "lists": lists / max(figures["lines"], 1), "bytes": ranged / max(figures["lines"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", help="a folder of real runs to hard-link into fleets")
    parser.add_argument("--train", metavar="DIR", help="train the source runs into DIR (needs DeepSpeed) and stop")
    parser.add_argument("--runs", default="1000,10000", help="fleet sizes, comma-separated")
    parser.add_argument("--folder", help="where to build the fleets (default: a temporary folder, removed)")
    parser.add_argument("--s3-runs", type=int, default=200, help="runs in the bucket of the local S3 server (0: none)")
    parser.add_argument("--no-strace", action="store_true", help="skip the count of file-system calls")
    parser.add_argument("--rounds", type=int, default=3, help="audit and bare reader in turns, the median of each")
    args = parser.parse_args()
    if args.train:
        train(args.train)
        return
    if not args.source:
        parser.error("--source DIR (real runs) is needed; make them with --train DIR in a venv with DeepSpeed")
    source = Path(args.source).resolve()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="awp-audit-fleet-"))
    rows = []
    try:
        for runs in (int(n) for n in args.runs.split(",")):
            fleet = folder / f"fleet{runs}"
            if not fleet.exists():
                build_fleet(source, fleet, runs)
            # the audit and the bare reader in turns, the median of each: a shared machine's load moves both
            pairs = [(measure(audit("--jsonl", str(fleet))), measure([sys.executable, "-S", "-c", BARE_READER,
                                                                     str(fleet)])) for _ in range(args.rounds)]
            one = sorted((pair[0] for pair in pairs), key=lambda m: m["cpu"])[len(pairs) // 2]
            bare = sorted((pair[1] for pair in pairs), key=lambda m: m["cpu"])[len(pairs) // 2]
            text = measure(audit(str(fleet)))
            as_json = measure(audit("--json", str(fleet)))
            two = measure(audit("--jsonl", "--jobs", "2", str(fleet)))
            calls = None if args.no_strace or runs > 10_000 else fs_calls(audit("--jsonl", str(fleet)))
            rows.append((runs, one, text, as_json, bare, two, calls))
            print(f"fleet of {runs}: {one['lines']} reports, CPU {one['cpu'] / runs * 1000:.2f} ms/run "
                  f"(bare reader {bare['cpu'] / runs * 1000:.2f}: {one['cpu'] / bare['cpu']:.2f}x), peak "
                  f"{one['rss']:.0f} MiB (text {text['rss']:.0f}, --json {as_json['rss']:.0f}), first line at "
                  f"{one['first']:.2f} s of {one['wall']:.1f} s, --jobs 2 {two['wall']:.1f} s wall, "
                  f"fs calls/run {'-' if calls is None else f'{calls / runs:.1f}'}", flush=True)
        s3 = s3_figures(source, args.s3_runs) if args.s3_runs else None
    finally:
        if not args.folder:
            shutil.rmtree(folder, ignore_errors=True)
    print("\n| runs | CPU ms/run (bare) | ratio | peak MiB jsonl / text / --json | first line s (of wall) | "
          "--jobs 1 / 2 wall s | fs calls/run |")
    print("|---|---|---|---|---|---|---|")
    for runs, one, text, as_json, bare, two, calls in rows:
        print(f"| {runs:,} | {one['cpu'] / runs * 1000:.2f} ({bare['cpu'] / runs * 1000:.2f}) | "
              f"{one['cpu'] / bare['cpu']:.2f}x | {one['rss']:.0f} / {text['rss']:.0f} / {as_json['rss']:.0f} | "
              f"{one['first']:.2f} ({one['wall']:.1f}) | {one['wall']:.1f} / {two['wall']:.1f} | "
              f"{'-' if calls is None else f'{calls / runs:.1f}'} |")
    if s3:
        print(f"\nS3 (moto on 127.0.0.1, {s3['runs']} runs): {s3['requests']:.1f} requests/run "
              f"({s3['lists']:.2f} of them listings), {s3['bytes'] / 1024:.1f} KiB/run in ranged reads, "
              f"{s3['wall']:.1f} s wall")


if __name__ == "__main__":
    main()
