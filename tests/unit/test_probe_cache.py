"""doctor's and status's kept answers (cli/probe_cache.py): a kept answer is proof for exactly the code it asked, and
the cache fails open. A fake DeepSpeed tree on the path stands in for a build; nothing here imports torch or DeepSpeed.

tests/test_builds.py runs the commands on a real build: probed, then answered from the cache, then probed again
after an edit of its lr_schedules.py.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from accelerate_warmup_patch.cli import probe_cache

SCHEDULES = "class WarmupLR:\n    pass\n"
ANSWER: dict[str, Any] = {"deepspeed": "0.16.0", "lacks": ["WarmupLR start"],
                          "lacks_changes": ["WarmupLR start (#6597)"], "differs_from_table": [], "step_lr": "float",
                          "verdicts": {"WarmupLR": "affected"}, "vendor": None}


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A DeepSpeed tree first on the path, whose package would say so if it were imported; the cache in a folder of
    the test's own. Returns the tree's lr_schedules.py."""
    package = tmp_path / "site" / "deepspeed"
    (package / "runtime").mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    (package / "runtime" / "__init__.py").write_text("")
    (package / "runtime" / "lr_schedules.py").write_text(SCHEDULES)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return package / "runtime" / "lr_schedules.py"


def _key(version: str = "0.16.0") -> probe_cache.Key:
    key, why = probe_cache.key(version)
    assert key is not None, why
    return key


def _ran(schedules: Path, **changed: Any) -> dict[str, Any]:
    """What a child that probed ``schedules`` answers (probe_build._run): the answer and the file it ran."""
    ran = {"file": str(schedules), "sha256": probe_cache.digest(str(schedules))}
    return {**ANSWER, "ran": {**ran, **changed}}


def _kept_files(tmp_path: Path) -> list[str]:
    folder = tmp_path / "cache" / "accelerate-warmup-patch" / "probes"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_the_key_is_the_very_scheduler_file_found_without_importing_deepspeed(tree: Path, tmp_path: Path) -> None:
    key = _key()
    assert key["file"] == os.path.realpath(tree) and not (tmp_path / "imported").exists()
    assert key["sha256"] == probe_cache.digest(str(tree)) and key["deepspeed"] == "0.16.0"
    assert {"torch", "python", "executable", "package", "package_code"} <= set(key)
    assert key["format"] == probe_cache.FORMAT


def test_an_answer_probed_now_is_kept_and_read_back_for_its_key(tree: Path, tmp_path: Path) -> None:
    key = _key()
    assert probe_cache.look_up(key) is None
    probed = probe_cache.keep(key, _ran(tree))
    assert probed["answered"]["how"] == "probed" and probed["answered"]["not_kept"] is None and "ran" not in probed
    assert probed["answered"]["cache"] == str(tmp_path / "cache" / "accelerate-warmup-patch" / "probes" /
                                              _kept_files(tmp_path)[0])
    kept = probe_cache.look_up(_key())
    assert kept is not None and {k: kept[k] for k in ANSWER} == ANSWER
    assert kept["answered"]["how"] == "kept" and kept["answered"]["probed_at"] == probed["answered"]["probed_at"]
    assert list(kept["verdicts"]) == list(ANSWER["verdicts"])  # in the child's order
    assert "probed now" in probe_cache.said(probed) and "answered from the cache" in probe_cache.said(kept)
    assert key["sha256"][:12] in probe_cache.said(kept)


def test_an_edit_of_the_scheduler_file_is_a_miss(tree: Path) -> None:
    probe_cache.keep(_key(), _ran(tree))
    tree.write_text(SCHEDULES + "# one more line\n")
    assert probe_cache.look_up(_key()) is None


@pytest.mark.parametrize("field", ["deepspeed", "torch", "python", "executable", "package", "package_code", "format"])
def test_an_answer_is_no_answer_for_another_version_interpreter_or_code(tree: Path, field: str) -> None:
    key = _key()
    probe_cache.keep(key, _ran(tree))
    assert probe_cache.look_up({**key, field: "another"}) is None


@pytest.mark.parametrize("ran, reason", [
    ({"file": "/elsewhere/lr_schedules.py"}, "the child ran /elsewhere/lr_schedules.py"),
    ({"sha256": "0" * 64}, "changed while it was probed"),
    ({"file": None}, "did not say which file it ran"),
])
def test_an_answer_is_kept_only_where_the_child_ran_that_very_file(tree: Path, tmp_path: Path, ran: dict[str, Any],
                                                                   reason: str) -> None:
    probed = probe_cache.keep(_key(), _ran(tree, **ran))
    assert reason in probed["answered"]["not_kept"] and probed["answered"]["cache"] is None
    assert _kept_files(tmp_path) == [] and probed["verdicts"] == ANSWER["verdicts"]


def test_an_answer_whose_child_saw_another_number_is_not_kept(tree: Path, tmp_path: Path) -> None:
    probed = probe_cache.keep(_key("0.16.0"), {**_ran(tree), "deepspeed": "0.15.2"})
    assert "metadata 0.16.0" in probed["answered"]["not_kept"] and _kept_files(tmp_path) == []


def test_no_cache_neither_reads_nor_writes(tree: Path, tmp_path: Path) -> None:
    probed = probe_cache.keep(_key(), _ran(tree), write=False)
    assert probed["answered"]["not_kept"] == "--no-cache" and _kept_files(tmp_path) == []


def test_no_file_to_find_is_no_key_and_the_answer_says_why_nothing_is_kept(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "site" / "deepspeed").mkdir(parents=True)
    (tmp_path / "site" / "deepspeed" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    key, why = probe_cache.key("0.16.0")
    assert key is None and "no file" in why
    probed = probe_cache.keep(key, {**ANSWER, "ran": None}, why)
    assert probed["answered"]["not_kept"] == why and probed["answered"]["file"] is None


# Fails open: a miss, never an error, never another key's answer --------------------------------------------------

def _entry(tmp_path: Path, tree: Path) -> Path:
    probe_cache.keep(_key(), _ran(tree))
    (name,) = _kept_files(tmp_path)
    return tmp_path / "cache" / "accelerate-warmup-patch" / "probes" / name


@pytest.mark.parametrize("content", [b"", b"{not json", b"[]", b'{"key": {}}', b"\xff\xfe"])
def test_a_kept_file_that_is_not_an_answer_is_a_miss(tree: Path, tmp_path: Path, content: bytes) -> None:
    _entry(tmp_path, tree).write_bytes(content)
    assert probe_cache.look_up(_key()) is None


def test_a_kept_file_truncated_or_without_an_answers_keys_is_a_miss(tree: Path, tmp_path: Path) -> None:
    entry = _entry(tmp_path, tree)
    whole = entry.read_bytes()
    entry.write_bytes(whole[: len(whole) // 2])
    assert probe_cache.look_up(_key()) is None
    kept = json.loads(whole)
    del kept["answer"]["lacks"]
    entry.write_text(json.dumps(kept))
    assert probe_cache.look_up(_key()) is None


def test_another_keys_file_under_this_keys_name_is_a_miss(tree: Path, tmp_path: Path) -> None:
    entry = _entry(tmp_path, tree)
    kept = json.loads(entry.read_text())
    kept["key"]["torch"] = "another"
    entry.write_text(json.dumps(kept))
    assert probe_cache.look_up(_key()) is None


def test_a_fifo_or_a_folder_in_a_kept_files_place_is_a_miss_without_blocking(tree: Path, tmp_path: Path) -> None:
    entry = _entry(tmp_path, tree)
    entry.unlink()
    os.mkfifo(entry)
    assert probe_cache.look_up(_key()) is None
    entry.unlink()
    entry.mkdir()
    assert probe_cache.look_up(_key()) is None
    assert "not written" in probe_cache.keep(_key(), _ran(tree))["answered"]["not_kept"]


def test_a_file_others_may_write_is_not_trusted(tree: Path, tmp_path: Path) -> None:
    entry = _entry(tmp_path, tree)
    entry.chmod(entry.stat().st_mode | stat.S_IWOTH)
    assert probe_cache.look_up(_key()) is None


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root can give a file away")
def test_another_users_file_is_not_trusted(tree: Path, tmp_path: Path) -> None:
    entry = _entry(tmp_path, tree)
    os.chown(entry, os.geteuid() + 4242, -1)
    assert probe_cache.look_up(_key()) is None


def test_a_cache_that_cannot_be_written_is_said_and_changes_nothing(tree: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))  # a file where the folder would be: even root fails
    probed = probe_cache.keep(_key(), _ran(tree))
    assert probed["answered"]["not_kept"].startswith("not written") and probed["verdicts"] == ANSWER["verdicts"]
    assert probe_cache.look_up(_key()) is None


def test_a_failed_write_leaves_neither_a_temporary_file_nor_a_part(tree: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(source: str, target: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    probed = probe_cache.keep(_key(), _ran(tree))
    assert "No space left" in probed["answered"]["not_kept"] and _kept_files(tmp_path) == []


def test_the_folder_is_xdg_cache_home_else_the_homes_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert probe_cache.folder() == str(tmp_path / "accelerate-warmup-patch" / "probes")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for ignored in ("", "relative/cache"):  # the XDG spec: a relative path is ignored
        monkeypatch.setenv("XDG_CACHE_HOME", ignored)
        assert probe_cache.folder() == str(tmp_path / "home" / ".cache" / "accelerate-warmup-patch" / "probes")
