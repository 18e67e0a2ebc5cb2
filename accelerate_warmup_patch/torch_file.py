"""Reading torch's files without torch, for the record's binding (``record_data``, in the job) and the audit
(``cli/audit``): one way to open a file, one bounded read, one walk of a zip's central directory, one set of bounds.

- **Only regular files, never blocking**: a FIFO, a device, a socket or a folder is refused before it is opened,
  and a file replaced by one in between is refused after (``open_fd``); every read is capped (``read_capped``).
- **A zip's central directory alone** (``zip_directory``): each member's name, CRC-32 and size, as zipfile's
  ``infolist()`` names them, walked with ``struct`` and bounded by DIRECTORY_BYTES, never a member's data; and the
  one member the audit reads, torch's ``<name>/data.pkl`` (``data_pkl``), checked as zipfile checks it.

The writer binds a file only where this walk reads it, so the audit never calls unreadable a file a record is
bound to. Standard library only; nothing here imports the rest of the package.
"""

from __future__ import annotations

import io
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Callable

MIB = 1 << 20
# A zip's central directory takes ~100 bytes a member: room for 600,000 tensors. Past it a file is not bound at a
# save and is unreadable to the audit.
DIRECTORY_BYTES = 64 * MIB
CHUNK = MIB  # the buffer of a file opened for reading


class Unreadable(Exception):
    """The file cannot be read as data; the message says why (a bound it passed is named)."""


class NotRegular(Unreadable):
    """A FIFO, a device, a socket or a folder where a file was expected: never opened for reading."""


# Opening only regular files -------------------------------------------------------------------------------

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a plain file")


def reason(error: BaseException) -> str:
    strerror = getattr(error, "strerror", None)
    return strerror.lower() if isinstance(strerror, str) else str(error)


def open_fd(path: str, known_regular: bool) -> tuple[int, os.stat_result]:
    """A descriptor of ``path`` and its fstat, if it is a regular file (after its symlinks); raises NotRegular or
    Unreadable.

    The stat before the open keeps a FIFO's writer and a device's driver out of it; O_NONBLOCK keeps a FIFO that
    replaced the file in between from blocking the open, and the fstat after it refuses that FIFO. A caller whose
    folder listing already said "a regular file, not a link" (``known_regular``) saves the stat: the listing is
    that check, and the fstat still refuses anything that replaced the file since."""
    try:
        if not known_regular:
            mode = os.stat(path).st_mode
            if not stat.S_ISREG(mode):
                raise NotRegular(f"not a regular file ({_kind(mode)}): not opened")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise Unreadable(f"cannot read it: {reason(error)}") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise NotRegular(f"not a regular file ({_kind(status.st_mode)}): not read")
        return fd, status
    except BaseException:
        os.close(fd)
        raise


def open_regular(path: str, known_regular: bool = False) -> IO[bytes]:
    """``path`` opened for reading if it is a regular file (after its symlinks); raises NotRegular or Unreadable
    (see ``open_fd``)."""
    fd, _ = open_fd(path, known_regular)
    try:
        return os.fdopen(fd, "rb", buffering=CHUNK)  # a buffer size given: no isatty() call
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: str, cap: int, known_regular: bool = False) -> bytes:
    """The bytes of the regular file ``path``; raises Unreadable when it holds more than ``cap``."""
    fd, status = open_fd(path, known_regular)
    data = b""
    try:
        while len(data) <= cap:
            chunk = os.read(fd, cap + 1 - len(data))
            data += chunk
            # a short read of a regular file that its size says is whole: nothing more to ask (a size of 0, as
            # /proc's files show, says nothing)
            if not chunk or 0 < status.st_size <= len(data):
                break
    except OSError as error:
        raise Unreadable(f"cannot read it: {reason(error)}") from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise Unreadable(f"holds more than {cap} bytes (the bound for this file): not read")
    return data


class RangedFile(io.RawIOBase):
    """A file read by ranges, as a seekable file: its last TAIL bytes in one read (a zip's end records and central
    directory), anything else WINDOW bytes at a time (the local header and data.pkl); a file up to WHOLE bytes in
    one. For an object store each read is a request, and locally a ``pread``: zipfile's many seeks and small reads
    then cost nothing, and the bytes read are the same few tens of KiB of a file of any size."""

    TAIL = 64 * 1024 + 1024
    WINDOW = 64 * 1024
    WHOLE = 256 * 1024

    def __init__(self, read_range: Callable[[int, int], bytes], size: int) -> None:
        super().__init__()
        self.read_range, self.size = read_range, size
        self.pos = 0
        self.chunks: list[tuple[int, bytes]] = []  # (offset, bytes) read: the last three

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise OSError("negative seek position")
        self.pos = base + offset
        return self.pos

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self.size - self.pos)
        if want <= 0:
            return 0
        data = self._cached(self.pos, want)
        if data is None:
            if self.size <= self.WHOLE:
                start, end = 0, self.size
            else:
                start = self.size - self.TAIL if self.pos >= self.size - self.TAIL else self.pos
                end = min(self.size, max(self.pos + want, start + self.WINDOW))
            self.chunks = [(start, self.read_range(start, end)), *self.chunks[:2]]
            data = self._cached(self.pos, want) or b""
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)

    def _cached(self, pos: int, want: int) -> bytes | None:
        for offset, chunk in self.chunks:
            if offset <= pos and pos + want <= offset + len(chunk):
                return chunk[pos - offset:pos - offset + want]
        return None


@dataclass
class ZipDirectory:
    """What a record is bound to (binding.py): the file's size and each member of its zip as (name, CRC-32,
    size), from the central directory the read walks anyway. ``zip`` stays False for torch's legacy format, and
    ``why`` says what made it not a zip (zipfile's words)."""

    zip: bool = False
    size: int = 0
    members: list[tuple[str, int, int]] = field(default_factory=list)
    why: str = ""
    identity: tuple[int, ...] = ()  # the file read, as its fstat named it: a later stat tells it is unchanged


def identity(status: os.stat_result) -> tuple[int, ...]:
    """A file as a stat names it: its inode, size, and modification and change times in nanoseconds. Another write
    changes at least one of them (a rewrite in place its times, a rename over it its inode)."""
    return status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def zip_directory(path: str, known_regular: bool = False) -> ZipDirectory:
    """The size and zip members of the file at ``path``, from its central directory alone (``zip`` False where it
    is not a zip); raises Unreadable (NotRegular for a FIFO, device, ...)."""
    fd, status = open_fd(path, known_regular)
    try:
        with RangedFile(lambda start, end: pread(fd, start, end), status.st_size) as file:
            found = zip_directory_of(file)  # type: ignore[arg-type]
        found.identity = identity(status)
        return found
    finally:
        os.close(fd)


def zip_directory_of(file: IO[bytes]) -> ZipDirectory:
    """``zip_directory`` of a file open as ``file`` (seekable): the central directory under DIRECTORY_BYTES,
    each member as zipfile's infolist() names it; never a member's data."""
    found = ZipDirectory(size=file.seek(0, io.SEEK_END))
    try:
        directory, _ = _directory(file)
        found.members = [_name_crc_size(entry, name, extra_field) for entry, name, extra_field in _entries(directory)]
    except zipfile.BadZipFile as error:
        found.members, found.why = [], str(error)
        return found
    except (OSError, EOFError, struct.error) as error:
        raise Unreadable(f"cannot read it: {reason(error)}") from None
    found.zip = True
    return found


def pread(fd: int, start: int, end: int) -> bytes:
    """The bytes from ``start`` to ``end`` (fewer at the end of the file), in one call where the system has one."""
    if hasattr(os, "pread"):
        return os.pread(fd, end - start, start)
    os.lseek(fd, start, os.SEEK_SET)
    return os.read(fd, end - start)


# torch's zip archive, as zipfile reads it, for its one member the audit needs ---------------------------------
#
# zipfile builds an object for every member of the central directory (one per tensor: thousands in a big model);
# the audit needs one, so the directory is walked with struct alone and only <name>/data.pkl is looked at. The
# checks are zipfile's own (its record layouts, its zip64 rules, its local header checks, the CRC-32), with the
# errors it raises; other members are not looked at (neither their extra fields nor their zip versions).
_END = struct.Struct("<4s4H2LH")  # end of central directory: 22 bytes
_END64_LOCATOR = struct.Struct("<4sLQL")  # 20 bytes
_END64 = struct.Struct("<4sQ2H2L4Q")  # 56 bytes
_DIRECTORY_ENTRY = struct.Struct("<4s4B4HL2L5H2L")  # 46 bytes
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # 30 bytes
_MEMBER = b"/data.pkl"


def _bad(why: str) -> zipfile.BadZipFile:
    return zipfile.BadZipFile(why)


def _read_at(file: IO[bytes], offset: int, size: int) -> bytes:
    if offset < 0:
        raise _bad("an offset before the start of the file")
    file.seek(offset)
    return file.read(size)


def _directory(file: IO[bytes]) -> tuple[bytes, int]:
    """The central directory's bytes and what to add to its offsets (bytes before the archive), as zipfile's
    _EndRecData and _EndRecData64 find them."""
    size = file.seek(0, io.SEEK_END)
    end = _read_at(file, size - _END.size, _END.size) if size >= _END.size else b""
    if len(end) == _END.size and end[:4] == b"PK\x05\x06" and end[-2:] == b"\x00\x00":
        at = size - _END.size
    else:  # a comment after the record: search the last 64 KiB for it
        start = max(size - (1 << 16) - _END.size, 0)
        tail = _read_at(file, start, size - start)
        found = tail.rfind(b"PK\x05\x06")
        if found < 0 or len(tail) - found < _END.size:
            raise _bad("File is not a zip file")
        end, at = tail[found:found + _END.size], start + found
    directory_size, directory_offset = _END.unpack(end)[5:7]
    location = at
    locator = _read_at(file, at - _END64_LOCATOR.size, _END64_LOCATOR.size) if at >= _END64_LOCATOR.size else b""
    if len(locator) == _END64_LOCATOR.size and locator[:4] == b"PK\x06\x07":
        _, disk64, _, disks = _END64_LOCATOR.unpack(locator)
        if disk64 != 0 or disks > 1:
            raise _bad("zipfiles that span multiple disks are not supported")
        end64 = _read_at(file, at - _END64_LOCATOR.size - _END64.size, _END64.size)
        if len(end64) == _END64.size and end64[:4] == b"PK\x06\x06":
            fields = _END64.unpack(end64)
            directory_size, directory_offset = fields[8], fields[9]
            location = at - _END64_LOCATOR.size - _END64.size
    extra = location - directory_size - directory_offset
    if directory_offset + extra < 0:
        raise _bad("Bad offset for central directory")
    if directory_size > DIRECTORY_BYTES:
        raise Unreadable(f"its zip directory takes {directory_size} bytes, past {DIRECTORY_BYTES} (a bound "
                         "of the audit): not read")
    directory = _read_at(file, directory_offset + extra, directory_size)
    if len(directory) != directory_size:
        raise _bad("Truncated central directory")
    return directory, extra


def data_pkl(file: IO[bytes], cap: int, members: ZipDirectory | None = None) -> bytes:
    """The bytes of the archive's one <name>/data.pkl, checked as zipfile checks a member it reads; ``members``,
    where given, gets every member as zipfile's infolist() names it (name, CRC, file_size)."""
    directory, extra = _directory(file)
    if members is not None:
        members.zip, members.size = True, file.seek(0, io.SEEK_END)
    found: list[tuple[Any, ...]] = []
    for entry, name, extra_field in _entries(directory):
        if name.endswith(_MEMBER) and name.count(b"/") == 1:
            found.append((*entry, name, extra_field))
        if members is not None:
            members.members.append(_name_crc_size(entry, name, extra_field))
    if not found:
        raise Unreadable("a zip archive without torch's <name>/data.pkl")
    if len(found) > 1:  # torch writes one: which of them a loader reads is not ours to guess
        raise Unreadable(f"a zip archive with {len(found)} <name>/data.pkl members (torch writes one)")
    return _member(file, found[0], extra, cap)


def _entries(directory: bytes) -> Iterator[tuple[tuple[Any, ...], bytes, bytes]]:
    """Each entry of a central directory: its fixed fields, its name (cut at a NUL, as zipfile does) and its extra
    field."""
    at = 0
    while at < len(directory):
        if at + _DIRECTORY_ENTRY.size > len(directory):
            raise _bad("Truncated central directory")
        entry = _DIRECTORY_ENTRY.unpack_from(directory, at)
        if entry[0] != b"PK\x01\x02":
            raise _bad("Bad magic number for central directory")
        name_size, extra_size, comment_size = entry[12], entry[13], entry[14]
        name_at = at + _DIRECTORY_ENTRY.size
        name = directory[name_at:name_at + name_size].split(b"\x00", 1)[0]  # zipfile ends a name at a NUL
        yield entry, name, directory[name_at + name_size:name_at + name_size + extra_size]
        at = name_at + name_size + extra_size + comment_size


def _name_crc_size(entry: tuple[Any, ...], name: bytes, extra_field: bytes) -> tuple[str, int, int]:
    """(name, CRC-32, size) as zipfile's ZipInfo holds them: the name UTF-8 where flag bit 11 says so, else cp437;
    the size from the zip64 extra field where the entry defers to it."""
    text = name.decode("utf-8" if entry[5] & 0x800 else "cp437", "surrogateescape")
    return text, entry[9], _zip64([entry[11], entry[10], entry[-1]], extra_field)[0]


def _zip64(fields: list[int], extra: bytes) -> list[int]:
    """The sizes and offset (file_size, compress_size, header_offset) that a zip64 extra field holds instead."""
    at = 0
    while at + 4 <= len(extra):
        kind, size = struct.unpack_from("<HH", extra, at)
        if at + 4 + size > len(extra):
            raise _bad(f"Corrupt extra field {kind:04x} (size={size})")
        if kind == 0x0001:
            values = extra[at + 4:at + 4 + size]
            for index in range(3):
                if fields[index] in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
                    if len(values) < 8:
                        what = ("File size", "Compress size", "Header offset")[index]
                        raise _bad(f"Corrupt zip64 extra field. {what} not found.")
                    fields[index] = struct.unpack("<Q", values[:8])[0]
                    values = values[8:]
        at += 4 + size
    return fields


def _member(file: IO[bytes], entry: tuple[Any, ...], extra: int, cap: int) -> bytes:
    flags, method, crc, name, extra_field = entry[5], entry[6], entry[9], entry[-2], entry[-1]
    file_size, compress_size, offset = _zip64([entry[11], entry[10], entry[-3]], extra_field)
    if entry[3] > zipfile.MAX_EXTRACT_VERSION:
        raise NotImplementedError(f"zip file version {entry[3] / 10:.1f}")
    if flags & 0x1:
        raise Unreadable("its data.pkl is encrypted (torch never encrypts): not read")
    if method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise Unreadable(f"its data.pkl is compressed with method {method} (torch stores it plain): not read")
    if file_size > cap:
        raise Unreadable(f"its data.pkl declares {file_size} bytes, past {cap} (a bound of the audit): not read")
    header = _read_at(file, offset + extra, _LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size:
        raise _bad("Truncated file header")
    local = _LOCAL_HEADER.unpack(header)
    if local[0] != b"PK\x03\x04":
        raise _bad("Bad magic number for file header")
    local_name = file.read(local[10])
    if flags & 0x20:
        raise NotImplementedError("compressed patched data (flag bit 5)")
    if flags & 0x40:
        raise NotImplementedError("strong encryption (flag bit 6)")
    if local_name.split(b"\x00", 1)[0] != name:
        raise _bad(f"File name in directory {name!r} and header {local_name!r} differ.")
    start = offset + extra + _LOCAL_HEADER.size + local[10] + local[11]
    if method == zipfile.ZIP_STORED:
        data = _read_at(file, start, min(compress_size, file_size))
    else:
        if compress_size > cap + cap // 8 + CHUNK:  # more than deflate ever needs for what it declares
            raise Unreadable(f"its data.pkl declares {compress_size} compressed bytes for {file_size} (a bound of "
                             "the audit): not read")
        inflate = zlib.decompressobj(-15)
        data = inflate.decompress(_read_at(file, start, compress_size), file_size)
    if zlib.crc32(data) != crc:  # what zipfile checks at the member's end (a size that claims more is not checked)
        raise _bad(f"Bad CRC-32 for file {name.decode('cp437')!r}")
    return data
