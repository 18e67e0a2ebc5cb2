"""How each multi-node runner class of each DeepSpeed release puts an exported variable on every node: the guard
table's rows that ``launcher.py`` follows and ``doctor`` reports (``MULTINODE_RUNNERS``, ``ADD_EXPORT_QUOTING``,
``runner_facts``). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .releases import NEWEST_DEEPSPEED, Fact, Span, parse, rows

# `deepspeed --hostfile` (and `accelerate launch` across machines, which calls it) starts the ranks
# of every node through a runner class. runner.py's main() sends a variable to the nodes only when
# its name starts with one of EXPORT_ENVS (MLFLOW, PYTHON, MV2, UCX, the accelerator's; NCCL before
# 0.12.6) or it is a line of .deepspeed_env: ACCELERATE_WARMUP_PATCH is neither on any release
# (runner.py @ v0.9.0..v0.19.8). Every runner calls MultiNodeRunner.__init__, which creates
# `self.exports`, and its get_cmd writes that dict into the command it builds.

_MNR = "deepspeed/launcher/multinode_runner.py"
_TWO_NODES = "real two-node pdsh launch over ssh (tests/test_multinode.py) on 0.14.4, 0.15.2, 0.19.8"
_CMD = "real get_cmd checked (tests/test_multinode.py) on 0.14.4, 0.15.2, 0.19.8"


@dataclass(frozen=True)
class Runner:
    """How a runner class puts an exported variable on every node."""

    launcher: str  # `deepspeed --launcher NAME`
    syntax: str  # what get_cmd writes for each export; "" when it writes nothing
    remote_shell: bool  # the command runs in a shell on each node: the value must be shell-quoted

    @property
    def carries(self) -> bool:
        return bool(self.syntax)


# each runner class of multinode_runner.py
MULTINODE_RUNNERS: tuple[Fact[Runner], ...] = (
    Fact("PDSHRunner", Span("0.9.0", None),
         Runner("pdsh", "export NAME=VALUE; before the command pdsh runs over ssh", remote_shell=True),
         f"{_MNR} @ v0.9.0..v0.19.8: PDSHRunner.get_cmd; {_TWO_NODES}"),
    Fact("OpenMPIRunner", Span("0.9.0", None), Runner("openmpi", "mpirun -x NAME=VALUE", remote_shell=False),
         f"{_MNR} @ v0.9.0..v0.19.8: OpenMPIRunner.get_cmd; {_CMD}"),
    Fact("MPICHRunner", Span("0.9.0", "0.9.1"), Runner("mpich", "", remote_shell=False),
         f"{_MNR} @ v0.9.0..v0.9.1: get_cmd builds -x NAME=VALUE but leaves it out of the command "
         "(MPICH's mpiexec passes the launching environment on by default: src/pm/hydra, not tested)"),
    Fact("MPICHRunner", Span("0.9.2", None), Runner("mpich", "mpirun -genv NAME=VALUE", remote_shell=False),
         f"{_MNR} @ v0.9.2..v0.19.8: MPICHRunner.get_cmd; {_CMD}"),
    Fact("IMPIRunner", Span("0.9.3", None), Runner("impi", "mpirun -genv NAME VALUE", remote_shell=False),
         f"{_MNR} @ v0.9.3 (class added)..v0.19.8: IMPIRunner.get_cmd; {_CMD}"),
    Fact("SlurmRunner", Span("0.9.0", None), Runner("slurm", "srun --export=ALL,NAME=VALUE", remote_shell=False),
         f"{_MNR} @ v0.9.0..v0.19.8: SlurmRunner.get_cmd; {_CMD}"),
    Fact("MVAPICHRunner", Span("0.9.0", None), Runner("mvapich", "mpirun -env NAME=VALUE", remote_shell=False),
         f"{_MNR} @ v0.9.0..v0.19.8: MVAPICHRunner.get_cmd; {_CMD}"),
)

# what MultiNodeRunner.add_export does to a value (why the patch writes its exports itself)
ADD_EXPORT_QUOTING: tuple[Fact[str], ...] = (
    Fact("MultiNodeRunner.add_export", Span("0.9.0", "0.15.1"), "the value as given",
         f"{_MNR} @ v0.9.0..v0.15.1: var.strip()"),
    Fact("MultiNodeRunner.add_export", Span("0.15.2", "0.16.4"), "always in double quotes: ranks started without "
         "a shell (MPI, Slurm) receive the quotes", f"{_MNR} @ v0.15.2..v0.16.4: f'\"{{var.strip()}}\"'"),
    Fact("MultiNodeRunner.add_export", Span("0.16.5", None), "in double quotes only when it has characters "
         "outside [\\w@%+=:,./-]", f"{_MNR} @ v0.16.5 (PR #7071)..v0.19.8: re.search before quoting"),
)


def runner_facts(deepspeed_version: str) -> list[Fact[Runner]]:
    """The multi-node runner classes of this release (the newest release's for an untested one)."""
    if parse(deepspeed_version)[:3] > parse(NEWEST_DEEPSPEED):
        deepspeed_version = NEWEST_DEEPSPEED
    return rows(MULTINODE_RUNNERS, deepspeed_version)


def runner_fact(runner: str, deepspeed_version: str) -> Fact[Runner] | None:
    return next((f for f in runner_facts(deepspeed_version) if f.subject == runner), None)

