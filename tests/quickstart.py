"""The README's shell lines (the launch lines of "Turn it on" among them), or another page's, and the exact command a
test runs for each (only a port option added)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BIN = Path(sys.executable).parent
PROGRAMS = {"python": sys.executable, "torchrun": str(BIN / "torchrun"), "accelerate": str(BIN / "accelerate"),
            "deepspeed": str(BIN / "deepspeed"), "accelerate-warmup-patch": str(BIN / "accelerate-warmup-patch")}
PORT_OPTION = {"torchrun": "--master_port", "deepspeed": "--master_port", "accelerate": "--main_process_port"}


def lines(page: Path = README) -> list[str]:
    """The shell lines of ``page`` (the README), every ```sh block of it, comments dropped."""
    text = page.read_text()
    blocks = [block.split("```", 1)[0] for block in text.split("```sh\n")[1:]]
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def line(start: str, page: Path = README) -> str:
    """The line ``start`` of ``page`` (the README), or the one line that starts with it."""
    found = [x for x in lines(page) if x == start] or [x for x in lines(page) if x.startswith(start)]
    assert len(found) == 1, (start, lines(page))
    return found[0]


def command(readme_line: str, script: str, port: int | None = None) -> list[str]:
    """The line as a test runs it: ``train.py`` is ``script``, the program the venv's, a port option after it."""
    words = [script if word == "train.py" else word for word in shlex.split(readme_line)]
    program, at = words[0], 2 if words[0] == "accelerate" else 1  # after `accelerate launch`
    extra = [PORT_OPTION[program], str(port)] if port is not None else []
    return [PROGRAMS[program], *words[1:at], *extra, *words[at:]]
