"""An sshd of the tests' own: its own port, keys and config (no AcceptEnv, no PAM), so ssh passes no
variable of the launching shell, as between two real nodes. It listens on 127.0.0.1 and 127.0.0.2:
two addresses of this machine that MPI launchers take for two hosts (they merge ``localhost`` and
``127.0.0.1`` into one). What it starts for 127.0.0.2 runs under a host name of its own (a UTS
namespace, ``unshare -u``, root only): MPI programs tell nodes apart by host name (DeepSpeed's
``mpi_discovery`` counts local ranks by ``MPI.Get_processor_name()``)."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ADDRESSES = ("127.0.0.1", "127.0.0.2")
SECOND_HOST = "awp-node-2"  # the host name of what runs on 127.0.0.2


class Unavailable(Exception):
    """What is missing, or what the daemon said when it did not start."""


@contextmanager
def sshd(folder: Path, port: int) -> Iterator[list[str]]:
    """Run the daemon while the block runs; yields the ``ssh`` options that log this user in."""
    missing = [tool for tool in ("ssh", "ssh-keygen") if shutil.which(tool) is None]
    daemon_path = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    if missing or daemon_path is None:
        raise Unavailable(f"OpenSSH's ssh and sshd (Debian: openssh-server); missing: "
                          f"{', '.join(missing + ([] if daemon_path else ['sshd']))}")
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)], check=True)
    (folder / "authorized_keys").write_text((folder / "client_key.pub").read_text())
    listen = "".join(f"ListenAddress {address}\n" for address in ADDRESSES)
    (folder / "sshd_config").write_text(
        f"Port {port}\n{listen}HostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPidFile {folder / 'sshd.pid'}\n"
        "StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nPermitUserEnvironment no\n"  # and no AcceptEnv
        f"Match LocalAddress {ADDRESSES[1]}\n"
        f"  ForceCommand unshare -u sh -c 'hostname {SECOND_HOST} && exec sh -c \"$SSH_ORIGINAL_COMMAND\"'\n")
    Path("/run/sshd").mkdir(exist_ok=True) if os.geteuid() == 0 else None  # its privilege separation folder
    daemon = subprocess.Popen([daemon_path, "-D", "-e", "-f", str(folder / "sshd_config")],
                              env={"PATH": "/usr/bin:/bin"}, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_listening(daemon, len(ADDRESSES))
        yield ["-p", str(port), "-i", str(folder / "client_key"), "-o", "IdentitiesOnly=yes",
               "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
               "-o", "BatchMode=yes"]
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def _wait_for_listening(daemon: subprocess.Popen[str], addresses: int) -> None:
    """``sshd -D -e`` says "Server listening on ..." on stderr for each address it accepts connections on."""
    assert daemon.stderr is not None
    said = b""
    while said.count(b"Server listening") < addresses:
        readable, _, _ = select.select([daemon.stderr], [], [], 10)
        chunk = os.read(daemon.stderr.fileno(), 4096) if readable else b""
        if not chunk:  # the daemon exited, or said nothing for 10 s
            daemon.terminate()
            raise Unavailable(f"sshd did not start: {said.decode(errors='replace')[-1500:]}")
        said += chunk
