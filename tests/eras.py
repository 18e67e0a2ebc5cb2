"""Era stacks: for each DeepSpeed minor 0.9-0.15 and one fixed release, the stack of its month.

Test tooling only (the runtime package ships no CI pins). ``nox -s matrix_era`` installs each row
into its own venv with its Python and runs ``tests/matrix.py era`` plus the start-up activation
tests on it. Standard library only: the noxfile imports this module.

How a row was chosen: the DeepSpeed release's upload date on the package registry (simple index,
JSON form, ``upload-time`` of its first file), then "what was current that day" for the rest:

    printf 'torch\\nwrapt\\naccelerate\\ntransformers\\ndeepspeed==X\\n' > r.in
    uv pip compile --no-deps --exclude-newer DATET23:59:59Z r.in --python-version PY

(run 2026-11-30). Every other dependency (numpy, pydantic, setuptools, pytest, ...) is installed with
the same ``--exclude-newer`` date, so the whole venv is of its month; a pin listed in ``newer``
is installed after, without the date, and the row says why.

Python per row: each era's torch supports the Python named (torch 2.0/2.1: 3.8-3.11; 2.2-2.4:
3.8-3.12; 2.5: 3.9-3.13). The rows spread 3.9-3.13 over the tier so each appears at least once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SOURCE = ("DeepSpeed upload date: registry simple index (JSON) upload-time; stack: uv pip compile --exclude-newer "
          "that date, run 2026-11-30")


@dataclass(frozen=True)
class Era:
    deepspeed: str
    date: str  # the DeepSpeed release's upload date: installs exclude anything newer
    python: str
    torch: str
    wrapt: str
    accelerate: str
    transformers: str
    # installed after the dated stack, without the date: (pin, why)
    newer: tuple[tuple[str, str], ...] = ()
    note: str = ""
    # False: no real engine on a CPU for this release; the row drives its scheduler classes (scheduler tier)
    engine: bool = True
    extras: tuple[str, ...] = field(default=())  # installed beside torch, before DeepSpeed builds

    @property
    def id(self) -> str:
        return self.deepspeed

    @property
    def exclude_newer(self) -> str:
        return f"{self.date}T23:59:59Z"


ERAS: tuple[Era, ...] = (
    Era("0.9.0", "2023-04-13", "3.10", "2.0.0", "1.14.1", "0.18.0", "4.28.0", engine=False,
        note="the floor release: scheduler tier on its stack. 0.9.0-0.9.2 ship no CPU accelerator "
             "(deepspeed/accelerator/ holds cuda_accelerator.py alone): the engine calls torch.cuda.set_device "
             "and stops at 'RuntimeError: Found no NVIDIA driver on your system'. wrapt 1.14.1, not the month's "
             "1.15.0: see 0.9.3"),
    Era("0.9.3", "2023-06-02", "3.9", "2.0.1", "1.14.1", "0.19.0", "4.29.2",
        note="the first release with a CPU accelerator, so the first a real engine runs on here; both floors "
             "pyproject.toml promises in one row, the one CI runs. Python 3.9: Debian 11's python3, the base of "
             "many 2023 images. wrapt 1.14.1 instead of the month's 1.15.0: TensorFlow 2.12 (current then) "
             "required wrapt<1.15, so images with TF had exactly this"),
    Era("0.10.3", "2023-09-11", "3.11", "2.0.1", "1.15.0", "0.22.0", "4.33.1"),
    Era("0.11.2", "2023-11-03", "3.9", "2.1.0", "1.15.0", "0.24.1", "4.35.0"),
    Era("0.12.6", "2023-12-21", "3.9", "2.1.2", "1.16.0", "0.25.0", "4.36.2"),
    Era("0.13.5", "2024-03-06", "3.10", "2.2.1", "1.16.0", "0.27.2", "4.38.2"),
    Era("0.14.2", "2024-04-23", "3.11", "2.2.2", "1.16.0", "0.29.3", "4.40.1",
        note="0.14.2, not 0.14.0: the first 0.14 release whose month has an accelerate (0.29) whose DeepSpeed "
             "path runs on CPU; like 0.14.0-0.14.3 it cannot build an engine beside torch 2.13"),
    Era("0.15.2", "2024-10-09", "3.12", "2.4.1", "2.5.2", "1.0.0", "4.45.2",
        newer=(("wrapt==2.5.2", "wrapt is no dependency of torch, DeepSpeed, accelerate or transformers: an "
                "October-2024 image without it that installs this package today gets the newest wrapt"),),
        note="the last affected release; wrapt 2.x on the release the patch acts on"),
    Era("0.16.0", "2024-11-25", "3.13", "2.5.1", "1.17.0", "1.1.1", "4.46.3",
        note="the first 0.16 (fixed upstream in 0.15.3): the patch must change nothing"),
)

BY_ID = {era.id: era for era in ERAS}
# what CI runs of this tier: the oldest real engine (on both floors: Python 3.9, wrapt 1.14.1) and the newest
# row (Python 3.13, a fixed release). .ci/run on a clean clone with an empty uv cache took 25 minutes with both
# (2026-11-30): under the 45-minute budget
CI_ERAS: tuple[str, ...] = ("0.9.3", "0.16.0")
