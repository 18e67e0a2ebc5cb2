"""Real multi-node launches on this machine carry the switch set only in the launching shell to every rank.

``nox -s launchers`` runs this module (minutes, as root; Debian's openmpi-bin, mpich, slurmctld, slurmd,
slurm-client, munge, openssh-server, pdsh; mpi4py in the venv); the ``tests`` session skips it. Every
rank writes what it received and the lr of its first optimizer steps (tests/launched.py, CPU, gloo).

- Two "nodes": this machine as ``localhost`` and as ``127.0.0.2``, which Open MPI and MPICH take for
  two hosts and reach over ssh, through an sshd of the tests' own that passes no variable
  (tests/sshd.py). ``ssh`` on the launching PATH is a script that adds its port and key, the way an
  ``~/.ssh/config`` would.
- Slurm: one host, munged, slurmctld and slurmd of the tests' own (tests/slurm.py), ``MpiDefault=pmix``.
- As root, Open MPI refuses to start unless ``OMPI_ALLOW_RUN_AS_ROOT=1`` and
  ``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` are set (DeepSpeed's runner passes no ``--allow-run-as-root``).
- What the ranks need besides the switch travels the way each launcher documents: ``mpirun -x NAME``,
  MPICH's ``-genvlist``, ``srun --export=ALL``; never ``.deepspeed_env``, whose values DeepSpeed
  0.15.2-0.16.4 sends to MPI and Slurm ranks in double quotes (multinode_runners.ADD_EXPORT_QUOTING).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import ports
import pytest
import slurm
import sshd
from conftest import HERE, installed, session_ccache
from ports import port

from accelerate_warmup_patch import releases

pytestmark = pytest.mark.skipif(not os.environ.get("AWP_REAL_LAUNCHES"),
                                reason="real multi-node launches take minutes: `nox -s launchers` runs them")

BIN = Path(sys.executable).parent
SCRIPT = str(HERE / "launched.py")
DEEPSPEED = installed("deepspeed")
SSH_PORT, SLURM_PORT = port(ports.REAL_SSH), port(ports.REAL_SLURM)
PORTS = itertools.count(29800)  # one rendezvous port per launch: no launch waits on another's TIME_WAIT
FIXED = releases.start_fact("WarmupLR", DEEPSPEED).value is releases.Start.SETS_EVERY_GROUP
WARMUP = [[0.0], [0.0], [0.0002], [0.0004]]  # WarmupLR 0 -> 1e-3 over 5 steps, steps 0-3 (launched.py)
UNPATCHED_STEP0 = [0.0] if FIXED else [0.001]  # 0.15.2's WarmupLR leaves the optimizer's lr, the peak
# what a rank needs besides the switch; PATH for the venv's ninja: with Debian's (1.11, on the default PATH of a
# rank that sshd or srun --export starts) the op's command hashes differ and every launch would recompile it
# (and the nox session's compiler cache, where it has one)
NEEDS = ("AWP_LAUNCH_OUT", "MASTER_PORT", "TORCH_EXTENSIONS_DIR", "PATH", *session_ccache())
# a value that would run something, add a variable or split a list if any runner let it
HOSTILE = "reset,AWP_INJECTED=1 $(touch {out}/ran) `touch {out}/ran` \"dq\" 'sq' ;x"


@pytest.fixture(scope="module")
def ssh_bin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder for the launching PATH whose ``ssh`` logs in to the tests' sshd on either address."""
    try:
        with sshd.sshd(tmp_path_factory.mktemp("sshd"), SSH_PORT) as options:
            folder = tmp_path_factory.mktemp("bin")
            real = shutil.which("ssh")
            (folder / "ssh").write_text(f"#!/bin/sh\nexec {real} {' '.join(options)} \"$@\"\n")
            (folder / "ssh").chmod(0o755)
            yield folder
    except sshd.Unavailable as error:
        pytest.skip(f"a two-node launch needs {error}")


@pytest.fixture(scope="module")
def mpich_bin(ssh_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``mpirun`` is Open MPI's on Debian when both are installed: a folder where it is MPICH's."""
    found = shutil.which("mpirun.mpich")
    if found is None:
        pytest.skip("MPICH's mpirun.mpich (Debian: mpich)")
    folder = tmp_path_factory.mktemp("mpich")
    (folder / "mpirun").symlink_to(found)
    # mpiexec looks for its proxy beside the path it was started by
    (folder / "hydra_pmi_proxy").symlink_to(shutil.which("hydra_pmi_proxy") or "/usr/bin/hydra_pmi_proxy")
    return folder


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    try:
        with slurm.cluster(tmp_path_factory.mktemp("slurm"), SLURM_PORT) as env:
            yield env
    except slurm.Unavailable as error:
        pytest.skip(f"a Slurm launch needs {error}")


def _launch(tmp: Path, command: list[str], switch: dict[str, str], env: dict[str, str] | None = None,
            hosts: str = "localhost slots=1\n127.0.0.2 slots=1\n", path: tuple[Path, ...] = (),
            ) -> tuple[subprocess.CompletedProcess[str], dict[str, list[list[float]]], dict[str, dict[str, object]]]:
    """Run ``command`` in a job folder with ``hostfile``, the switch only in the launching environment."""
    out, job = tmp / "out", tmp / "job"
    out.mkdir()
    job.mkdir()
    (job / "hostfile").write_text(hosts)
    shell = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")
             and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    port = str(next(PORTS))
    shell.update({"AWP_LAUNCH_OUT": str(out), "MASTER_PORT": port})
    if os.geteuid() == 0:  # Open MPI's own switches for root; DeepSpeed's runner passes no --allow-run-as-root
        shell.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    shell["PATH"] = os.pathsep.join([*map(str, path), str(BIN), shell.get("PATH", "")])
    shell.update(env or {})
    shell.update({k: v.format(out=out) for k, v in switch.items()})
    proc = _run([part.replace("{port}", port) for part in command], shell, job)
    lrs = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))}
    seen = {p.stem[4:]: json.loads(p.read_text()) for p in sorted(out.glob("env-rank*.json"))}
    return proc, lrs, seen


def _run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a launch; past 300 s (a rank that died leaves the others waiting) kill its whole process group."""
    with subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # mpirun, srun, and through them the ranks
            stdout, stderr = proc.communicate()
            stderr += "\n[test] killed after 300 s"
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def _deepspeed(launcher: str, *args: str) -> list[str]:
    return [str(BIN / "deepspeed"), "--hostfile", "hostfile", "--launcher", launcher, "--master_addr", "127.0.0.1",
            "--master_port", "{port}", *args, SCRIPT]  # _launch fills in the port


def _report(name: str, proc: subprocess.CompletedProcess[str], lrs: object, seen: object) -> None:
    print(f"DeepSpeed {DEEPSPEED}, {name}: lr of optimizer steps 0-3 per rank: {lrs}; seen: {seen}")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]


def _patched_everywhere(lrs: dict[str, list[list[float]]], seen: dict[str, dict[str, object]], value: str) -> None:
    assert sorted(seen) == ["rank0", "rank1"], seen
    for rank in seen.values():
        assert rank["ACCELERATE_WARMUP_PATCH"] == value, rank
        assert rank["armed"] == {"mode": "reset", "applied_by": [".pth"]}, rank
    assert lrs == {"rank0": WARMUP, "rank1": WARMUP}


def _unpatched_everywhere(lrs: dict[str, list[list[float]]], seen: dict[str, dict[str, object]]) -> None:
    assert sorted(seen) == ["rank0", "rank1"], seen
    assert [rank["ACCELERATE_WARMUP_PATCH"] for rank in seen.values()] == [None, None]
    assert [rows[0] for rows in lrs.values()] == [UNPATCHED_STEP0, UNPATCHED_STEP0], lrs


def _literal_everywhere(seen: dict[str, dict[str, object]], out: Path, value: str) -> None:
    assert sorted(seen) == ["rank0", "rank1"], seen
    for rank in seen.values():
        assert rank["ACCELERATE_WARMUP_PATCH"] == value.format(out=out), rank
        assert rank["AWP_INJECTED"] is None, rank
    assert not (out / "ran").exists()


def _two_hosts(seen: dict[str, dict[str, object]]) -> None:
    """One rank on each "node": the one on 127.0.0.2 was started over ssh, under a host name of its own."""
    where = sorted((str(rank["host"]), bool(rank["ssh"])) for rank in seen.values())
    assert where == sorted([(socket.gethostname(), False), (sshd.SECOND_HOST, True)]), seen


# Open MPI: deepspeed --launcher openmpi (mpirun -x) -------------------------------------------

OPENMPI = ("--launcher_args", " ".join(f"-x {name}" for name in NEEDS))


@pytest.mark.parametrize("mode", ["reset", None])
def test_openmpi_launch_on_two_hosts(ssh_bin, tmp_path, mode):
    switch = {"ACCELERATE_WARMUP_PATCH": mode} if mode else {}
    proc, lrs, seen = _launch(tmp_path, _deepspeed("openmpi", *OPENMPI), switch, path=(ssh_bin,))
    _report(f"deepspeed --launcher openmpi, two hosts, switch {mode}", proc, lrs, seen)
    _two_hosts(seen)
    if mode:
        _patched_everywhere(lrs, seen, mode)
        assert f"INFO: OpenMPIRunner exports ACCELERATE_WARMUP_PATCH={mode} to every node" in proc.stderr
    else:
        _unpatched_everywhere(lrs, seen)


@pytest.mark.parametrize("value", ["off", HOSTILE], ids=["off", "hostile"])
def test_openmpi_carries_a_value_literally(ssh_bin, tmp_path, value):
    proc, _, seen = _launch(tmp_path, [*_deepspeed("openmpi", *OPENMPI), "--env-only"],
                            {"ACCELERATE_WARMUP_PATCH": value}, path=(ssh_bin,))
    _report(f"deepspeed --launcher openmpi --env-only, switch {value!r}", proc, {}, seen)
    _two_hosts(seen)
    _literal_everywhere(seen, tmp_path / "out", value)


# MPICH: deepspeed --launcher mpich (mpirun -genv), passing on only what -genvlist names --------

MPICH = ("--launcher_args", "-genvlist " + ",".join(NEEDS))


@pytest.mark.parametrize("mode", ["reset", None])
def test_mpich_launch_on_two_hosts(ssh_bin, mpich_bin, tmp_path, mode):
    switch = {"ACCELERATE_WARMUP_PATCH": mode} if mode else {}
    proc, lrs, seen = _launch(tmp_path, _deepspeed("mpich", *MPICH), switch, path=(mpich_bin, ssh_bin))
    _report(f"deepspeed --launcher mpich, two hosts, switch {mode}", proc, lrs, seen)
    _two_hosts(seen)
    if mode:
        _patched_everywhere(lrs, seen, mode)
    else:
        _unpatched_everywhere(lrs, seen)


def test_mpich_carries_a_hostile_value_literally(ssh_bin, mpich_bin, tmp_path):
    proc, _, seen = _launch(tmp_path, [*_deepspeed("mpich", *MPICH), "--env-only"],
                            {"ACCELERATE_WARMUP_PATCH": HOSTILE}, path=(mpich_bin, ssh_bin))
    _report("deepspeed --launcher mpich --env-only, a hostile value", proc, {}, seen)
    _two_hosts(seen)
    _literal_everywhere(seen, tmp_path / "out", HOSTILE)


# Slurm: deepspeed --launcher slurm (srun --export=ALL,NAME=VALUE) and plain srun ---------------

def _slurm_hosts() -> str:
    return f"{socket.gethostname()} slots=2\n"  # one Slurm node; --force_multi makes DeepSpeed use srun


@pytest.mark.parametrize("mode", ["reset", None])
def test_slurm_launch(cluster, tmp_path, mode):
    switch = {"ACCELERATE_WARMUP_PATCH": mode} if mode else {}
    proc, lrs, seen = _launch(tmp_path, _deepspeed("slurm", "--force_multi", "--no_ssh_check"), switch,
                              env=cluster, hosts=_slurm_hosts())
    _report(f"deepspeed --launcher slurm, switch {mode}", proc, lrs, seen)
    if mode:
        _patched_everywhere(lrs, seen, mode)
        assert f"INFO: SlurmRunner exports ACCELERATE_WARMUP_PATCH={mode} to every node" in proc.stderr
    else:
        _unpatched_everywhere(lrs, seen)


@pytest.mark.parametrize("value", ["off", HOSTILE], ids=["off", "hostile"])
def test_slurm_carries_a_value_literally(cluster, tmp_path, value):
    proc, _, seen = _launch(tmp_path, [*_deepspeed("slurm", "--force_multi", "--no_ssh_check"), "--env-only"],
                            {"ACCELERATE_WARMUP_PATCH": value}, env=cluster, hosts=_slurm_hosts())
    _report(f"deepspeed --launcher slurm --env-only, switch {value!r}", proc, {}, seen)
    _literal_everywhere(seen, tmp_path / "out", value)


def test_plain_srun_patches_every_rank(cluster, tmp_path):
    proc, lrs, seen = _launch(tmp_path, ["srun", "-n", "2", sys.executable, "-u", SCRIPT],
                              {"ACCELERATE_WARMUP_PATCH": "reset"}, env=cluster)
    _report("srun -n 2, switch reset", proc, lrs, seen)
    _patched_everywhere(lrs, seen, "reset")


def test_in_a_job_submitted_with_export_none_only_an_explicit_export_reaches_the_ranks(cluster, tmp_path):
    # `sbatch --export=NONE` leaves SLURM_EXPORT_ENV=NONE in the job: a plain srun there drops what the
    # batch script exported; `--export=ALL,NAME=VALUE` (what DeepSpeed's SlurmRunner writes) does not
    needs, port = ",".join(NEEDS), str(next(PORTS))
    steps = {
        "plain": f"srun -n 2 --export={needs} {sys.executable} -u {SCRIPT} --env-only",
        "all": f"srun -n 2 --export=ALL,ACCELERATE_WARMUP_PATCH=reset {sys.executable} -u {SCRIPT} --env-only",
        "deepspeed": " ".join(_deepspeed("slurm", "--force_multi", "--no_ssh_check")).replace("{port}", port)
        + " --env-only",
    }
    script = ["#!/bin/sh", "set -e", f"cd {tmp_path / 'job'}",
              f"export PATH={BIN}:$PATH SLURM_CONF={cluster['SLURM_CONF']}",
              f"export MASTER_PORT={port} TORCH_EXTENSIONS_DIR={os.environ.get('TORCH_EXTENSIONS_DIR', '')}",
              *(f"export {name}={value}" for name, value in session_ccache().items()),
              "export ACCELERATE_WARMUP_PATCH=reset"]
    for name, step in steps.items():
        script += [f"mkdir -p {tmp_path / name}", f"AWP_LAUNCH_OUT={tmp_path / name} {step}"]
    (tmp_path / "job.sh").write_text("\n".join(script) + "\n")
    proc, _, _ = _launch(tmp_path, ["sbatch", "--wait", "--export=NONE", "-n", "2", "-o", str(tmp_path / "job.log"),
                                    str(tmp_path / "job.sh")], {}, env=cluster, hosts=_slurm_hosts())
    seen = {name: [json.loads(p.read_text())["ACCELERATE_WARMUP_PATCH"]
                   for p in sorted((tmp_path / name).glob("env-rank*.json"))] for name in steps}
    log = (tmp_path / "job.log").read_text() if (tmp_path / "job.log").exists() else ""
    _report("sbatch --export=NONE job: plain srun, srun --export=ALL,..., deepspeed --launcher slurm", proc, {},
            seen)
    assert seen == {"plain": [None, None], "all": ["reset", "reset"], "deepspeed": ["reset", "reset"]}, log[-4000:]


# accelerate launch across two machines: DeepSpeed's pdsh runner --------------------------------

def test_accelerate_launch_across_two_machines(ssh_bin, tmp_path):
    # accelerate writes its whole environment into ./.deepspeed_env (values without ; < > space or newline)
    proc, lrs, seen = _launch(tmp_path, [
        str(BIN / "accelerate"), "launch", "--use_deepspeed", "--zero_stage", "2", "--num_processes", "2",
        "--num_machines", "2", "--machine_rank", "0", "--main_process_ip", "127.0.0.1",
        "--main_process_port", "{port}", "--deepspeed_multinode_launcher", "pdsh",
        "--deepspeed_hostfile", "hostfile", "--mixed_precision", "no", "--dynamo_backend", "no",
        SCRIPT, "--accelerate"], {"ACCELERATE_WARMUP_PATCH": "reset"},
        hosts="localhost slots=1\n127.0.0.1 slots=1\n", path=(ssh_bin,))
    _report("accelerate launch --num_machines 2 (pdsh)", proc, lrs, seen)
    assert [rank["node"] for rank in seen.values()] == ["0", "1"] and all(rank["ssh"] for rank in seen.values())
    _patched_everywhere(lrs, seen, "reset")


REFUSED = {  # accelerate always adds --num_gpus N (or --include/--exclude) to the deepspeed command
    "openmpi": "ValueError: openmpi backend does not support limiting num nodes/gpus",
    "mpich": "ValueError: mpich backend does not support limiting num nodes/gpus",
    "slurm": "srun: error: Invalid generic resource (gres) specification",  # srun --gpus 1 on a CPU node
}


@pytest.mark.parametrize("launcher", sorted(REFUSED))
def test_accelerate_launch_across_machines_with_another_runner_is_refused(ssh_bin, mpich_bin, cluster, tmp_path,
                                                                          launcher):
    proc, _, _ = _launch(tmp_path, [
        str(BIN / "accelerate"), "launch", "--use_deepspeed", "--zero_stage", "2", "--num_processes", "2",
        "--num_machines", "2", "--machine_rank", "0", "--main_process_ip", "127.0.0.1",
        "--main_process_port", "{port}", "--deepspeed_multinode_launcher", launcher,
        "--deepspeed_hostfile", "hostfile", "--mixed_precision", "no", "--dynamo_backend", "no",
        SCRIPT, "--accelerate"], {"ACCELERATE_WARMUP_PATCH": "reset"}, env=cluster,
        path=(mpich_bin, ssh_bin) if launcher == "mpich" else (ssh_bin,))
    print(f"accelerate launch --num_machines 2 --deepspeed_multinode_launcher {launcher}: rc {proc.returncode}")
    assert proc.returncode != 0 and REFUSED[launcher] in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
