"""The vendor builds of DeepSpeed whose code is known: the upstream release each is based on, what differs, and where
that was read (``VENDOR_BUILDS``, ``vendor_build``). A build's number alone says nothing sure about its code
(``releases.not_the_release``); these are the builds whose code was read. Part of the guard table; standard library
only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class VendorBuild:
    """A vendor's build of DeepSpeed whose code is known: the upstream release it is based on, and what differs."""

    name: str
    pattern: str  # a regular expression its __version__ matches in full
    based_on: str  # the upstream release whose lr_schedules.py it runs
    differences: str
    source: str

    def matches(self, version: str) -> bool:
        return re.fullmatch(self.pattern, version.strip()) is not None


# Intel Gaudi's builds, read in HabanaAI/DeepSpeed's branch of each SynapseAI release (its version.txt and build.txt
# give the version string; its lr_schedules.py compared line by line with upstream's at the release it is based on,
# and engine.py's _load_checkpoint, which restores the scheduler as upstream's does). Branches 1.10.0 and older are
# based on releases below the table's floor; a release not listed was not read and is not named.
_GAUDI = "HabanaAI/DeepSpeed, branch"
_SAME = "lr_schedules.py the same as upstream's"
VENDOR_BUILDS: tuple[VendorBuild, ...] = (
    VendorBuild("Intel Gaudi's DeepSpeed (software 1.11, 1.12)", r"0\.9\.4\+hpu\.synapse\.v1\.(11\.0|12\.[01])",
                "0.9.4", "none in the schedulers",
                f"{_GAUDI}es 1.11.0 (a24dac1fa6), 1.12.0 (14fc572fa4), 1.12.1 (453d6c9723): {_SAME} at v0.9.4"),
    VendorBuild("Intel Gaudi's DeepSpeed (software 1.13)", r"0\.10\.3\+hpu\.synapse\.v1\.13\.0", "0.10.3",
                "none in the schedulers", f"{_GAUDI} 1.13.0 (6522014efa): {_SAME} at v0.10.3"),
    VendorBuild("Intel Gaudi's DeepSpeed (software 1.14, 1.15)", r"0\.12\.4\+hpu\.synapse\.v1\.(14\.0|15\.[01])",
                "0.12.4", "none in the schedulers",
                f"{_GAUDI}es 1.14.0 (fad45b24c7), 1.15.0 (5d37dd20a4), 1.15.1 (7e475fbdcf): {_SAME} at v0.12.4"),
    VendorBuild("Intel Gaudi's DeepSpeed (software 1.16, 1.17)", r"0\.14\.0\+hpu\.synapse\.v1\.1[67]\.[01]",
                "0.14.0", "none in the schedulers",
                f"{_GAUDI}es 1.16.0 (4cbcca3af5), 1.16.1 and 1.16.2 (d0420c5fd6, both v1.16.1), 1.17.0 (a658791b80), "
                f"1.17.1 (e3078cb74d): {_SAME} at v0.14.0"),
    VendorBuild("Intel Gaudi's DeepSpeed (software 1.18, 1.19)", r"0\.14\.4\+hpu\.synapse\.v1\.1[89]\.0",
                "0.14.4", "WarmupLR.step writes a tensor lr where the group holds one (torch.tensor(lr) on the group's "
                "device: the same values; a step keeps a tensor a tensor, as 0.18.1's update_lr does)",
                f"{_GAUDI}es 1.18.0 (907611fe6d), 1.19.0 (9c2d0431b6): lr_schedules.py is v0.14.4's with that "
                "change; real builds of the Gaudi 1.19 tree on CPU (issue #46)"),
    VendorBuild("Intel Gaudi's DeepSpeed (software 1.20, 1.21)", r"0\.16\.1\+hpu\.synapse\.v1\.2[01]\.0",
                "0.16.1", "WarmupLR.step writes a tensor lr where the group holds one, in place of update_lr "
                "(torch.tensor(lr) on the group's device: the same values)",
                f"{_GAUDI}es 1.20.0 (61543a9638), 1.21.0 (ad4a2d0f7f): lr_schedules.py is v0.16.1's with that change"),
    VendorBuild("EleutherAI's DeeperSpeed (v3.0)", r"0\.16\.5\+(91d1c55|65d9f99)[0-9a-f]*", "0.16.5",
                "load_checkpoint(load_module_only=True) restores the lr scheduler too (not the optimizer, not "
                "global_steps): the load net sees it (loads.py)",
                "EleutherAI/DeeperSpeed, tag v3.0 (91d1c55) and main (65d9f99): lr_schedules.py the same as upstream's "
                "at v0.16.5; engine.py's _load_checkpoint with the scheduler restored under load_module_only"),
)


def vendor_build(version: str) -> VendorBuild | None:
    """The vendor build ``version`` names, where the table knows its code; None elsewhere."""
    return next((build for build in VENDOR_BUILDS if build.matches(version)), None)
