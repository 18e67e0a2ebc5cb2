"""`audit` of an fsspec URL, on fsspec's in-memory file system (the unit tier's stand-in for a bucket; the real S3
server is tests/test_audit_store.py's): the same reports as the same folders on disk, a model-states file read by
ranges and never whole past 256 KiB, latest and the record read only where they count, bounds as on a disk."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files

from accelerate_warmup_patch import binding, record_data
from accelerate_warmup_patch.cli.audit import command, stores, writers

fsspec = pytest.importorskip("fsspec", reason="fsspec (nox -s unit installs it)")


def audit(*paths: str) -> tuple[int, list[dict[str, Any]], str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = command.main(list(paths), form=writers.JSONL)
    reports = [r for r in map(json.loads, out.getvalue().splitlines()) if "verdict" in r]  # not the part's lines
    return code, reports, err.getvalue()


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[tuple[Path, Any, list[tuple[str, Any, Any]]]]:
    """Runs on disk, the same in memory://runs, and the reads the audit makes of the memory file system."""
    root = tmp_path / "runs"
    files.write_run(root / "plain")
    files.write_run(root / "trainer" / "checkpoint-3", tag="global_step3", global_steps=3)
    files.write_run(root / "trainer" / "checkpoint-6", tag="global_step6", version="0.19.8")
    files.write_run(root / "engines", tag="pytorch_model")
    files.write_run(root / "engines", tag="pytorch_model_1")
    big = files.model_states(client_state={"weights": files.Tensor((1 << 20,))})
    files.write_run(root / "big", value=big)
    # the tensor's storage, as torch writes it: a megabyte in the zip after data.pkl, never to be read
    fs = fsspec.filesystem("memory")
    if fs.exists("/runs"):
        fs.rm("/runs", recursive=True)
    fs.put(str(root), "/runs", recursive=True)
    reads: list[tuple[str, Any, Any]] = []
    original = type(fs).cat_file

    def counted(self: Any, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> Any:
        reads.append((path, start, end))
        return original(self, path, start=start, end=end, **kwargs)

    type(fs).cat_file = counted
    try:
        yield root, fs, reads
    finally:
        type(fs).cat_file = original
        fs.rm("/runs", recursive=True)


def test_a_memory_url_gives_the_reports_of_the_same_folders_on_disk(memory: Any) -> None:
    root, _, _ = memory
    disk_code, disk, _ = audit(str(root))
    code, stored, stderr = audit("memory://runs")
    assert code == disk_code == 1 and "Traceback" not in stderr, stderr
    keys = ("verdict", "why", "engine", "step0_lr", "deepspeed_version", "step0_deepspeed_version", "global_steps")
    assert [{k: r[k] for k in keys} for r in stored] == [{k: r[k] for k in keys} for r in disk]
    assert [r["path"].replace("memory:///runs", str(root)) for r in stored] == [r["path"] for r in disk]


def test_a_model_states_file_is_read_by_ranges_never_whole(memory: Any) -> None:
    _, fs, reads = memory
    size = fs.size("/runs/big/global_step6/mp_rank_00_model_states.pt")
    assert size > 1 << 20
    audit("memory://runs/big")
    big = "big/global_step6/mp_rank_00_model_states.pt"
    ranges = [(start, end) for path, start, end in reads if path.endswith(big)]
    assert len(ranges) == 2 and sum(end - start for start, end in ranges) < 200 * 1024, ranges
    # latest is not read where a save folder holds one tag: nothing it could change
    assert not [path for path, _, _ in reads if path.endswith("latest")], reads


def test_a_file_past_its_bound_is_not_read_on_a_store(memory: Any) -> None:
    _, fs, reads = memory
    fs.pipe("/runs/plain/global_step6/accelerate_warmup_patch.json", b" " * (70 * 1024))
    _, (stored,), _ = audit("memory://runs/plain")
    assert any("holds more than 65536 bytes" in note for note in stored["notes"]), stored
    assert not [path for path, _, _ in reads if path.endswith(".json")], reads


def test_a_missing_url_is_the_paths_line_and_exit_2() -> None:
    code, reports, stderr = audit("memory://no-such-folder")
    assert code == 2 and reports == [] and stderr.startswith("accelerate-warmup-patch audit: error: "), stderr
    assert "nothing was judged" in stderr.splitlines()[-1], stderr  # the summary says so (#55 item 5)


def _extras() -> dict[str, set[str]]:
    """pyproject.toml's extras, each the set of package names it installs."""
    text = (Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return {name: {pin.split(">")[0].split("=")[0] for pin in json.loads(pins)}
            for name, pins in re.findall(r"^(\w+)\s*=\s*(\[.*\])", section, re.M)}


@pytest.mark.parametrize("scheme", ["s3", "gs", "az", "abfs", "oci"])
def test_without_fsspec_the_error_names_packages_that_exist(scheme: str) -> None:
    # the package is not on PyPI: the hint names fsspec and the package fsspec's own registry names for the scheme,
    # and an extra only where pyproject.toml has one holding exactly these (0.6.0 named an [az] extra it lacks)
    hint = stores.install_hint(scheme)
    known = importlib.import_module("fsspec.registry").known_implementations
    implementation = known[scheme]["class"].split(".")[0]
    extras = _extras()
    if scheme == "oci":
        assert hint == "pip install fsspec and the package fsspec's registry names for oci://", hint
        return
    assert hint.startswith(f"pip install fsspec {implementation}"), hint
    for extra in re.findall(r"\[(\w+)\] extra", hint):
        assert extras[extra] == {"fsspec", implementation}, extras
    assert ("[" in hint) is any(implementation in packages for packages in extras.values()), hint


def test_a_url_without_fsspec_is_one_line_naming_what_to_install(tmp_path: Path) -> None:
    # python -S: no site-packages, so no fsspec; the package alone on the path
    proc = subprocess.run([sys.executable, "-S", "-m", "accelerate_warmup_patch", "audit", "s3://bucket/runs"],
                          env={"PYTHONPATH": str(Path(__file__).parents[2])}, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr == (
        "accelerate-warmup-patch audit: error: s3://bucket/runs: s3:// needs fsspec and the store's package: pip "
        "install fsspec s3fs (the [s3] extra: pip install '<the wheel or the clone>[s3]')\n"), proc.stderr


def test_the_binding_of_the_other_states_files_is_checked_by_ranges_on_a_store(memory: Any) -> None:
    # a ZeRO-3-like save: the record binds the optimizer's states file beside the model states; a big one is read
    # by its central directory alone
    root, fs, reads = memory
    tag = root / "plain" / "global_step6"
    files.write_torch_zip(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt", {"fp32": files.Tensor((1 << 20,))})
    step0 = {"how": "observed", "deepspeed": "0.15.2", "scheduler": "WarmupLR", "mode": "reset", "patch": "0.6.0",
             "lrs": [0.001], "expected": [0.0], "patch_did": "fixed", "global_steps": 0}
    record: dict[str, Any] = {
        "record": 2, "package": "accelerate-warmup-patch", "version": "0.6.0", "mode": "reset", "deepspeed": "0.15.2",
        "reference": "0.19.8", "global_steps": 6, "bound_to": binding.bind(str(tag)), "scheduler": None,
        "first_step": None, "step0": step0, "loads": []}
    assert record["bound_to"]["others"]["files"] == 1
    (tag / record_data.RECORD_FILE).write_text(json.dumps(record))
    fs.put(str(root / "plain"), "/runs/plain2", recursive=True)
    _, (disk,), _ = audit(str(root / "plain"))
    _, (stored,), _ = audit("memory://runs/plain2")
    assert disk["record"]["bound"] is stored["record"]["bound"] is True, (disk, stored)
    optim = [(start, end) for path, start, end in reads if path.endswith("optim_states.pt")]
    assert optim and sum(end - start for start, end in optim) < 200 * 1024, optim
    rerun = files.write_torch_zip(root / "rerun.pt", {"fp32": files.Tensor((1 << 19,))})  # other partitions
    fs.pipe("/runs/plain2/global_step6/zero_pp_rank_0_mp_rank_00_optim_states.pt", rerun.read_bytes())
    _, (stored,), _ = audit("memory://runs/plain2")
    assert stored["record"] is None, stored
