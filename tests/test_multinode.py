"""A multi-node ``deepspeed`` launch carries the switch set in the launching shell to every node.

Two "nodes" on this machine: ``localhost`` and ``127.0.0.1`` in a hostfile, reached by DeepSpeed's
pdsh runner over ssh through an sshd of the test's own (its own port, keys and config: no AcceptEnv,
no PAM, so ssh passes no variable of the launching shell). The runners that cannot run here (MPI
flavours, Slurm) are the real runner classes of the installed release, built from the real
arguments; their real ``get_cmd`` must carry the variables.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import ports
import pytest
import sshd
from conftest import HERE, bare_audit, installed, session_ccache
from ports import port

from accelerate_warmup_patch import multinode_runners

BIN = Path(sys.executable).parent
SSHD_PORT = port(ports.MULTINODE_SSHD)
TRAIN_PORT, ENV_PORT, RECORDS_PORT = (port(ports.MULTINODE_TRAIN), port(ports.MULTINODE_ENV),
                                      port(ports.MULTINODE_RECORDS))
DEEPSPEED = installed("deepspeed")
RANKS = [{"node": "0", "rank": "0"}, {"node": "1", "rank": "1"}]


# The runners' command lines ------------------------------------------------------------------

def _carries(cmd: list[str], launcher: str, name: str, value: str) -> bool:
    """Whether ``cmd`` sets ``name`` to exactly ``value`` on the nodes, in that runner's syntax."""
    pairs = list(zip(cmd, cmd[1:]))
    if launcher == "pdsh":  # one argument holds every export, in the shell ssh starts
        return any(f"export {name}={value};" in part for part in cmd)
    if launcher == "openmpi":
        return ("-x", f"{name}={value}") in pairs
    if launcher == "mpich":
        return ("-genv", f"{name}={value}") in pairs
    if launcher == "impi":
        return any(cmd[i:i + 3] == ["-genv", name, value] for i in range(len(cmd)))
    if launcher == "slurm":
        return any(a.startswith("--export=ALL,") and f"{name}={value}" in a.split(",") for a in cmd)
    if launcher == "mvapich":
        return ("-env", f"{name}={value}") in pairs
    raise AssertionError(f"no check for runner {launcher}: add one for the new table row")


@pytest.fixture(scope="module")
def hostfile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hosts") / "hostfile"
    path.write_text("localhost slots=1\n127.0.0.1 slots=1\n")
    return path


def _cmds(hostfile: Path, env: dict[str, str], *flags: str) -> tuple[dict[str, list[str]], str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    proc = subprocess.run([sys.executable, str(HERE / "multinode_cmds.py"), str(hostfile), *flags],
                          env={**full, **env}, capture_output=True, text=True, timeout=600, cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


@pytest.fixture(scope="module")
def armed_cmds(hostfile: Path) -> tuple[dict[str, list[str]], str]:
    return _cmds(hostfile, {"ACCELERATE_WARMUP_PATCH": "reset", "ACCELERATE_WARMUP_PATCH_STRICT": "1"})


FACTS = {fact.subject: fact for fact in multinode_runners.runner_facts(DEEPSPEED)}


@pytest.mark.parametrize("runner", sorted(FACTS))
def test_each_runner_carries_both_variables_to_every_node(armed_cmds, runner):
    cmds, log = armed_cmds
    fact = FACTS[runner]
    assert fact.value.carries, f"{runner} of DeepSpeed {DEEPSPEED}: {fact.source}"
    assert _carries(cmds[runner], fact.value.launcher, "ACCELERATE_WARMUP_PATCH", "reset"), cmds[runner]
    assert _carries(cmds[runner], fact.value.launcher, "ACCELERATE_WARMUP_PATCH_STRICT", "1"), cmds[runner]
    assert f"INFO: {runner} exports ACCELERATE_WARMUP_PATCH=reset, ACCELERATE_WARMUP_PATCH_STRICT=1 to every " \
           f"node ({fact.value.syntax})" in log, log[-3000:]


def test_every_runner_class_of_the_release_is_in_the_table(armed_cmds):
    from deepspeed.launcher import multinode_runner

    base = multinode_runner.MultiNodeRunner
    classes = {name for name, value in vars(multinode_runner).items()
               if isinstance(value, type) and issubclass(value, base) and value is not base}
    assert classes == set(FACTS)


def test_off_is_carried_as_off_by_every_runner(hostfile):
    # What the post-import hook does when it runs in a launcher whose shell says off (--direct:
    # the package itself arms nothing for off; see test_off_in_the_launching_shell_is_carried_to_every_node).
    # On 0.15.2-0.16.4 DeepSpeed's own add_export would send '"off"' to MPI and Slurm ranks.
    cmds, _ = _cmds(hostfile, {"ACCELERATE_WARMUP_PATCH": "off"}, "--direct")
    for runner, fact in FACTS.items():
        assert _carries(cmds[runner], fact.value.launcher, "ACCELERATE_WARMUP_PATCH", "off"), (runner, cmds[runner])
        assert "ACCELERATE_WARMUP_PATCH_STRICT" not in " ".join(cmds[runner])  # unset: not sent


def test_a_failure_while_exporting_never_breaks_the_launch_and_raises_in_strict_mode(hostfile):
    result, log = _cmds(hostfile, {"ACCELERATE_WARMUP_PATCH": "reset"}, "--fault")
    assert result["open"][0] == "pdsh" and not _carries(result["open"], "pdsh", "ACCELERATE_WARMUP_PATCH", "reset")
    assert "exporting ACCELERATE_WARMUP_PATCH to the other nodes failed (RuntimeError('injected'))" in log
    assert result["strict"].startswith("PatchError"), result


# doctor ------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["reset", "off"])
def test_doctor_says_whether_the_multinode_launcher_carries_the_switch(mode):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    proc = subprocess.run([sys.executable, "-m", "accelerate_warmup_patch", "doctor", "--json"],
                          env={**env, "ACCELERATE_WARMUP_PATCH": mode}, capture_output=True, text=True, timeout=120)
    nodes = json.loads(proc.stdout)["multinode"]
    # off too: the launcher carries the kill switch (test_off_in_the_launching_shell_is_carried_to_every_node)
    assert nodes["carries"] is True, nodes
    assert nodes["runners"] == {fact.value.launcher: fact.value.syntax for fact in FACTS.values()}
    assert mode != "off" or ("exports off" in nodes["why"] and ".deepspeed_env" in nodes["why"])


# A real two-node launch ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """An sshd on 127.0.0.1:SSHD_PORT that lets this user in with a key of the test's own."""
    if shutil.which("pdsh") is None:
        pytest.skip("a two-node launch needs pdsh (Debian: pdsh)")
    try:
        with sshd.sshd(tmp_path_factory.mktemp("sshd"), SSHD_PORT) as options:
            yield {"PDSH_SSH_ARGS_APPEND": " ".join(options)}
    except sshd.Unavailable as error:
        pytest.skip(f"a two-node launch needs {error}")


def _launch(nodes: dict[str, str], out: Path, port: int, shell: dict[str, str], deepspeed_env: dict[str, str],
            *script_args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, object]]]:
    """``deepspeed --hostfile`` with pdsh, the switch only in ``shell``; each rank records what it saw."""
    out.mkdir()
    job = out / "job"  # the launch's working directory: DeepSpeed reads ./.deepspeed_env here
    job.mkdir()
    (job / "hostfile").write_text("localhost slots=1\n127.0.0.1 slots=1\n")
    # what the nodes need besides the switch, the way DeepSpeed documents it
    lines = {"AWP_LAUNCH_OUT": str(out), **deepspeed_env}
    if os.environ.get("TORCH_EXTENSIONS_DIR"):  # the nox session's per-venv op folder
        lines["TORCH_EXTENSIONS_DIR"] = os.environ["TORCH_EXTENSIONS_DIR"]
    lines.update(session_ccache())
    # and the venv's PATH: a rank that sshd starts finds Debian's ninja (1.11) on its default PATH, whose
    # command hashes differ from the venv's ninja (1.13), so it would recompile the op, and the next test
    # run through the launching shell would recompile it back (seen: minutes per test on a loaded machine)
    lines["PATH"] = os.environ["PATH"]
    (job / ".deepspeed_env").write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "AWP_LAUNCH_OUT")}
    env.update(nodes)
    env.update(shell)
    command = [str(BIN / "deepspeed"), "--hostfile", "hostfile", "--launcher", "pdsh", "--no_ssh_check",
               "--master_addr", "127.0.0.1", "--master_port", str(port), str(HERE / "launched.py"), *script_args]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=job)
    seen = {p.name: json.loads(p.read_text()) for p in sorted(out.glob("env-rank*.json"))}
    return proc, seen


def _where(seen: dict[str, dict[str, object]]) -> list[dict[str, object]]:
    return [{"node": s["node"], "rank": s["rank"]} for s in seen.values()]


def test_ssh_alone_does_not_carry_the_switch(nodes):
    proc = subprocess.run(["ssh", *nodes["PDSH_SSH_ARGS_APPEND"].split(), "127.0.0.1",
                           "echo ${ACCELERATE_WARMUP_PATCH-unset}"],
                          env={**os.environ, "ACCELERATE_WARMUP_PATCH": "reset"}, capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.strip() == "unset", proc.stderr


def test_two_node_pdsh_launch_patches_every_rank_on_every_node(nodes, tmp_path):
    proc, seen = _launch(nodes, tmp_path / "out", TRAIN_PORT, {"ACCELERATE_WARMUP_PATCH": "reset"}, {})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    lrs = {path.stem: json.loads(path.read_text()) for path in sorted((tmp_path / "out").glob("rank*.json"))}
    print(f"DeepSpeed {DEEPSPEED}, two nodes over pdsh/ssh, lr of optimizer steps 0-3 per rank: {lrs}; "
          f"seen: {list(seen.values())}")
    assert _where(seen) == RANKS
    for rank in seen.values():
        assert rank["ssh"] and rank["ACCELERATE_WARMUP_PATCH"] == "reset"
        assert rank["armed"] == {"mode": "reset", "applied_by": [".pth"]}
    assert lrs == {"rank0": [[0.0], [0.0], [0.0002], [0.0004]], "rank1": [[0.0], [0.0], [0.0002], [0.0004]]}
    output = proc.stdout + proc.stderr
    assert "INFO: PDSHRunner exports ACCELERATE_WARMUP_PATCH=reset to every node" in output


def test_a_deepspeed_env_line_wins_over_the_launching_shell(nodes, tmp_path):
    # DeepSpeed's own order for every variable it exports: the environment first, then the file
    proc, seen = _launch(nodes, tmp_path / "out", ENV_PORT, {"ACCELERATE_WARMUP_PATCH": "reset"},
                         {"ACCELERATE_WARMUP_PATCH": "off"}, "--env-only")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert _where(seen) == RANKS
    assert [s["ACCELERATE_WARMUP_PATCH"] for s in seen.values()] == ["off", "off"]


def test_off_in_the_launching_shell_is_carried_to_every_node(hostfile):
    # the activation path of the `deepspeed` command itself: the .pth, then the post-import hooks
    cmds, _ = _cmds(hostfile, {"ACCELERATE_WARMUP_PATCH": "off"})
    for runner, fact in FACTS.items():
        assert _carries(cmds[runner], fact.value.launcher, "ACCELERATE_WARMUP_PATCH", "off"), (runner, cmds[runner])


def test_with_node_local_storage_each_node_writes_its_record_and_each_nodes_folder_audits_fixed(
        nodes, tmp_path, tmp_path_factory):
    # checkpoint.use_node_local_storage: each node saves into a folder of its own, and its local rank 0 writes the
    # record there (record_writer._writer_rank), bound to the model states that node wrote
    proc, seen = _launch(nodes, tmp_path / "out", RECORDS_PORT, {"ACCELERATE_WARMUP_PATCH": "reset"}, {},
                         "--node-local-save")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert _where(seen) == RANKS
    folders = [tmp_path / "out" / f"node{n}" for n in (0, 1)]
    records = [json.loads((folder / "ckpt" / "accelerate_warmup_patch.json").read_text()) for folder in folders]
    for record in records:
        assert record["bound_to"]["file"] == "mp_rank_00_model_states.pt", record
        assert record["step0"]["how"] == "observed" and record["step0"]["lrs"] == [0.0], record
    audit = bare_audit(tmp_path_factory.mktemp("bare"))
    reports = json.loads(audit("-m", "accelerate_warmup_patch", "audit", "--json", *map(str, folders)).stdout)
    assert [r["verdict"] for r in reports] == ["not affected", "not affected"], reports
    assert [r["step0_lr"] for r in reports] == [0.0, 0.0], reports
