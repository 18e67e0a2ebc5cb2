"""`audit s3://...`: a bucket of a real S3-protocol server (moto's, started here on 127.0.0.1) holding real
checkpoints (trained here: unpatched, patched, an HF Trainer run; a hostile pickle, a broken zip) gives the same
verdicts as the same folders on disk, in a few requests per run, never reading a model-states file whole; a
missing bucket, no credentials and a server that does not answer are each a PATH's line, exit 2, no traceback.

The audit runs as a user runs it (a child process); the server records every request it gets (moto's recorder).
Nothing leaves 127.0.0.1: the endpoint is the local server, and instance metadata is off.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import ports
import pytest
from conftest import Spec, installed, run_specs

installed("deepspeed")  # real engines
# moto's recorder writes its file where it is told when imported (else into the working directory: the checkout)
os.environ.setdefault("MOTO_RECORDER_FILEPATH", os.path.join(tempfile.gettempdir(), f"awp-moto-{os.getpid()}"))
moto_server = pytest.importorskip("moto.server", reason="moto[server] (nox -s tests installs it)")
pytest.importorskip("s3fs", reason="s3fs (nox -s tests installs it)")

RUNS = {  # in one process, in this order: the patched run last, once the patch is applied it stays
    "unpatched": Spec(scheduler="WarmupLR-linear"),
    "trainer": Spec(path="trainer", scheduler="WarmupDecayLR"),
    "patched": Spec(scheduler="WarmupLR-linear", patch="before", mode="reset"),
}
BUCKET = "fleet"
REQUESTS_PER_RUN = 8  # the bound: listing, latest, the record, the model-states file's ranges


class _RunsACommand:
    """Pickles as a call of os.system: what torch.load(weights_only=False) would run."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (self.command,)


def _odd_runs(root: Path) -> None:
    """A hostile pickle (a client_state that would run a command) and a broken zip, beside the real runs."""
    import torch

    tag = root / "hostile" / "global_step1"
    tag.mkdir(parents=True)
    (tag.parent / "latest").write_text("global_step1")
    config = {"optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "scheduler": {
        "type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 5}}}
    torch.save({"ds_version": "0.15.2", "ds_config": config, "global_steps": 1,
                "module": _RunsACommand(f"touch {root / 'it-ran'}")}, tag / "mp_rank_00_model_states.pt")
    broken = root / "broken" / "ckpt"
    shutil.copytree(root / "unpatched" / "ckpt", broken)
    (broken.parent / "latest").write_text("ckpt")
    states = broken / "mp_rank_00_model_states.pt"
    states.write_bytes(states.read_bytes()[:-40])  # the zip's end records cut off


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    run_specs(*(replace(spec, save_to=str(root / name)) for name, spec in RUNS.items()))
    _odd_runs(root)
    return root


@pytest.fixture(scope="module")
def server(runs: Path) -> Iterator[dict[str, str]]:
    """moto's S3 server on 127.0.0.1 with the runs uploaded; the environment a child audits it with."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    started = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    started.start()
    port = started._server.server_port  # port 0: the system's choice, so no session's block is taken
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTHON"))},
           "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "NO_PROXY": "127.0.0.1",
           "PYTHONPATH": str(Path(__file__).parents[1])}
    import s3fs

    fs = s3fs.S3FileSystem(key="test", secret="test", endpoint_url=env["AWS_ENDPOINT_URL"])
    fs.mkdir(BUCKET)
    fs.put(str(runs), f"{BUCKET}/runs", recursive=True)
    try:
        yield env
    finally:
        started.stop()
        with contextlib.suppress(OSError):
            os.remove(os.environ["MOTO_RECORDER_FILEPATH"])


def audit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accelerate_warmup_patch", "audit", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def reports(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The reports of a --jsonl output (not its part's opening and closing lines)."""
    return [r for r in map(json.loads, proc.stdout.splitlines()) if "verdict" in r]


def recorded(env: dict[str, str], action: str) -> list[dict[str, Any]]:
    url = f"{env['AWS_ENDPOINT_URL']}/moto-api/recorder/{action}"
    with urllib.request.urlopen(urllib.request.Request(url, method="GET" if "download" in action else "POST")) as r:
        body = r.read().decode()
    return [json.loads(line) for line in body.splitlines()] if "download" in action else []


def test_a_bucket_gives_the_verdicts_of_the_same_folders_on_disk(runs: Path, server: dict[str, str]) -> None:
    on_disk = audit(server, "--jsonl", str(runs))
    recorded(server, "reset-recording")
    recorded(server, "start-recording")
    in_bucket = audit(server, "--jsonl", f"s3://{BUCKET}/runs")
    recorded(server, "stop-recording")
    requests = recorded(server, "download-recording")
    assert in_bucket.returncode == on_disk.returncode == 1 and "Traceback" not in in_bucket.stderr, in_bucket.stderr
    disk = {Path(r["path"]).name: r for r in reports(on_disk)}
    bucket = {r["path"].rpartition("/")[2]: r for r in reports(in_bucket)}
    assert sorted(bucket) == sorted(disk) == ["broken", "hostile", "patched", "trainer", "unpatched"], bucket
    for name, report in disk.items():
        keys = ("verdict", "why", "step0_lr", "step0_lrs", "scheduler", "deepspeed_version", "global_steps")
        assert {key: bucket[name][key] for key in keys} == {key: report[key] for key in keys}, name
        record = bucket[name]["record"]
        assert record == report["record"] or record["file"].startswith(f"s3://{BUCKET}/runs/{name}/"), name
        assert bucket[name]["path"] == f"s3://{BUCKET}/runs/{name}"
    assert disk["unpatched"]["verdict"] == disk["trainer"]["verdict"] == "affected"
    assert disk["patched"]["verdict"] == "not affected" and disk["broken"]["verdict"] == "unreadable"
    assert not (runs / "it-ran").exists()
    per_run = Counter(_run_of(request["url"]) for request in requests)
    del per_run[None]  # the PATH's own check and the listing of the runs folder
    assert set(per_run) == set(disk) and max(per_run.values()) <= REQUESTS_PER_RUN, per_run
    # a model-states file is read in ranges, never whole past 256 KiB
    whole = [r for r in requests if "model_states" in r["url"] and not r.get("headers", {}).get("Range")]
    assert whole == [], whole


def _run_of(url: str) -> str | None:
    """The run a request is for: the key's or the listed prefix's first part under runs/."""
    tail = url.split(f"/{BUCKET}", 1)[1]
    key = tail.split("prefix=runs%2F", 1)[1].split("%2F")[0] if "prefix=runs%2F" in tail else \
        tail[len("/runs/"):].split("/")[0] if tail.startswith("/runs/") else ""
    return key.split("&")[0] or None


@pytest.mark.parametrize("case", ["no bucket", "no credentials", "no server"])
def test_a_store_that_cannot_be_read_is_the_paths_line_and_exit_2(server: dict[str, str], case: str) -> None:
    env = dict(server)
    url = f"s3://{BUCKET}/runs"
    if case == "no bucket":
        url = "s3://no-such-bucket/runs"
    elif case == "no credentials":
        del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    else:
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{ports.port(ports.NO_LISTENER)}"
        env["AWS_MAX_ATTEMPTS"] = "1"
    proc = audit(env, "--jsonl", url, str(Path(__file__).parent / "no-such-folder"))
    assert proc.returncode == 2 and reports(proc) == [] and "Traceback" not in proc.stderr, proc
    lines = proc.stderr.splitlines()
    # each PATH's one error line, then the summary, which says that nothing was judged (#55 item 5)
    errors = [line for line in lines if line.startswith("accelerate-warmup-patch audit: error: ")]
    assert len(errors) == 2 and errors[0].startswith(f"accelerate-warmup-patch audit: error: {url}: "), lines
    assert lines[:2] == errors and "nothing was judged" in lines[-1], lines
