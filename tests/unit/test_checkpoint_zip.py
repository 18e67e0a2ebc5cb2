"""torch_file reads a zip's data.pkl as zipfile does (zipfile is the oracle: the one seam): the same bytes
where zipfile reads them, and a refusal where it refuses; on archives torch's way, with a comment, bytes before
the archive, zip64 records, deflate, and thousands of damaged copies. The one difference allowed: a damaged extra
field or zip version of another member, which zipfile checks for every member and the audit, reading one, does
not."""

from __future__ import annotations

import io
import random
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files

from accelerate_warmup_patch import torch_file
from accelerate_warmup_patch.cli.audit import checkpoint_pickle
from accelerate_warmup_patch.cli.audit.checkpoint_pickle import Unreadable


def by_zipfile(archive: bytes) -> bytes | str:
    try:
        with zipfile.ZipFile(io.BytesIO(archive)) as opened:
            infos = [i for i in opened.infolist() if i.filename.endswith("/data.pkl") and i.filename.count("/") == 1]
            if len(infos) != 1:
                return "refused"
            return opened.read(infos[0])
    except Exception as error:
        return f"refused: {error}"


def by_audit(archive: bytes) -> bytes | str:
    try:
        return torch_file.data_pkl(io.BytesIO(archive), checkpoint_pickle.BOUNDS["pickle_bytes"])
    except (Unreadable, Exception) as error:
        return f"refused: {error}"


def same(archive: bytes) -> None:
    audit, oracle = by_audit(archive), by_zipfile(archive)
    if isinstance(audit, str) and "a bound of the audit" in audit:
        return  # a size the audit refuses to read, which zipfile would read
    if isinstance(audit, bytes) and isinstance(oracle, str):
        assert "extra field" in oracle or "zip file version" in oracle, (audit[:40], oracle)
        return
    assert isinstance(audit, bytes) == isinstance(oracle, bytes), (audit[:80], oracle[:80])
    if isinstance(audit, bytes):
        assert audit == oracle


def torch_zip(tmp_path: Path) -> bytes:
    path = files.write_torch_zip(tmp_path / "states.pt", files.model_states(
        client_state=files.gpt_neox_client_state()))
    return path.read_bytes()


def written(entries: dict[str, bytes], *, method: int = zipfile.ZIP_STORED, comment: bytes = b"",
            zip64: bool = False, before: bytes = b"") -> bytes:
    out = io.BytesIO()
    out.write(before)
    with zipfile.ZipFile(out, "a" if before else "w", compression=method) as archive:
        for name, data in entries.items():
            with archive.open(name, "w", force_zip64=zip64) as member:
                member.write(data)
        archive.comment = comment
    return out.getvalue()


PICKLE = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."


@pytest.mark.parametrize("archive", [
    written({"archive/data.pkl": PICKLE, "archive/data/0": b"\x00" * 64}),
    written({"archive/data.pkl": PICKLE}, method=zipfile.ZIP_DEFLATED),
    written({"archive/data.pkl": PICKLE}, comment=b"a comment after the end record"),
    written({"archive/data.pkl": PICKLE}, zip64=True),
    written({"archive/data/0": b"x" * 10, "archive/data.pkl": PICKLE}, before=b"bytes before the archive" * 10),
    written({"archive/data/0": b"x"}),
    written({"a/data.pkl": PICKLE, "b/data.pkl": PICKLE}),
    written({"a/b/data.pkl": PICKLE}),
    b"", b"PK", b"not a zip at all" * 10,
], ids=["stored", "deflated", "comment", "zip64", "prefixed", "no-data.pkl", "two", "nested", "empty", "PK",
        "text"])
def test_an_archive_reads_as_zipfile_reads_it(archive: bytes) -> None:
    same(archive)


def test_a_torch_archive_reads_as_zipfile_reads_it(tmp_path: Path) -> None:
    same(torch_zip(tmp_path))


def test_damaged_archives_read_or_are_refused_as_zipfile_does(tmp_path: Path) -> None:
    rng = random.Random(7)
    sources = [torch_zip(tmp_path), written({"archive/data.pkl": PICKLE * 50}, method=zipfile.ZIP_DEFLATED),
               written({"archive/data.pkl": PICKLE}, zip64=True)]
    for _ in range(3000):
        damaged = bytearray(rng.choice(sources))
        for _ in range(rng.randint(1, 3)):
            # damage where the records are: the end, the directory before it, the local header at the start
            at = rng.choice([rng.randrange(len(damaged)), len(damaged) - 1 - rng.randrange(min(300, len(damaged))),
                             rng.randrange(min(120, len(damaged)))])
            damaged[at] = rng.randrange(256)
        if rng.random() < 0.1:
            del damaged[rng.randrange(len(damaged)):]
        same(bytes(damaged))
