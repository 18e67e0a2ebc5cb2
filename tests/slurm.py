"""A Slurm cluster of one host for the tests: munged, slurmctld and slurmd of its own.

Everything lives in one folder (key, sockets, state, spool, logs, slurm.conf) on ports of its own,
so it neither needs nor touches /etc/slurm, /etc/munge or a Slurm the machine may already run; the
daemons run in the foreground under this process and stop when the block ends. Clients find it
through ``SLURM_CONF``. Needs root (slurmd starts jobs as their user) and Debian's slurmctld,
slurmd, slurm-client and munge.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "sinfo", "munge")


class Unavailable(Exception):
    """What is missing, or what a daemon said when it did not start."""


def _find(name: str) -> str | None:
    return shutil.which(name) or next((str(p) for d in ("/usr/sbin", "/sbin") if (p := Path(d, name)).exists()), None)


@contextmanager
def cluster(folder: Path, first_port: int, cpus: int = 2) -> Iterator[dict[str, str]]:
    """Run a one-host cluster (partition ``awp``, ``cpus`` CPUs) while the block runs; yields the clients' env."""
    missing = [name for name in DAEMONS + CLIENTS if _find(name) is None]
    if missing:
        raise Unavailable(f"Debian's slurmctld, slurmd, slurm-client and munge; missing: {', '.join(missing)}")
    if os.geteuid() != 0:
        raise Unavailable("root: slurmd starts each job as the user who submitted it")
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    node = socket.gethostname()
    (folder / "slurm.conf").write_text(f"""\
ClusterName=awp
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={first_port}
SlurmdPort={first_port + 1}
SrunPortRange={first_port + 2}-{first_port + 20}
AuthType=auth/munge
AuthInfo=socket={folder / 'munge.sock'}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder / 'state'}
SlurmdSpoolDir={folder / 'spool'}
SlurmctldPidFile={folder / 'slurmctld.pid'}
SlurmdPidFile={folder / 'slurmd.pid'}
SlurmctldLogFile={folder / 'slurmctld.log'}
SlurmdLogFile={folder / 'slurmd.log'}
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=pmix
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=awp Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
    # MpiDefault=pmix: what a cluster sets for MPI jobs; DeepSpeed's ranks under srun find their rank
    # through mpi4py (comm.mpi_discovery), and Open MPI reads it from Slurm's PMIx server
    env = {"SLURM_CONF": str(folder / "slurm.conf")}
    commands = [
        [_find("munged"), "-F", "-f", f"--key-file={key}", f"--socket={folder / 'munge.sock'}",
         f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
         f"--seed-file={folder / 'munged.seed'}"],
        [_find("slurmctld"), "-D", "-i", "-f", str(folder / "slurm.conf")],
        [_find("slurmd"), "-D", "-f", str(folder / "slurm.conf")],
    ]
    with ExitStack() as stack:
        for command in commands:
            log = stack.enter_context(open(folder / f"{Path(str(command[0])).name}.out", "w"))
            daemon = subprocess.Popen([str(c) for c in command], stdout=log, stderr=subprocess.STDOUT,
                                      env={**os.environ, **env})
            stack.callback(_stop, daemon)
            if command[0] == _find("munged"):
                _wait(lambda: (folder / "munge.sock").exists(), daemon, folder, "munged")
        _wait(lambda: _idle(env), daemon, folder, "slurmd")
        yield env


def _idle(env: dict[str, str]) -> bool:
    said = subprocess.run(["sinfo", "-h", "-o", "%t"], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=30)
    return said.stdout.strip() == "idle"


def _wait(ready: object, daemon: subprocess.Popen[bytes], folder: Path, name: str) -> None:
    """Poll ``ready`` (a daemon has no "ready" line to wait for) for up to 60 s."""
    deadline = time.monotonic() + 60
    while not ready():  # type: ignore[operator]
        if daemon.poll() is not None or time.monotonic() > deadline:
            logs = "".join(p.read_text(errors="replace")[-1500:] for p in sorted(folder.glob("*.out"))
                           + sorted(folder.glob("*.log")))
            raise Unavailable(f"{name} did not start: {logs}")
        time.sleep(0.2)


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    daemon.terminate()
    try:
        daemon.wait(timeout=30)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait(timeout=30)
