"""A record written into FOLDER by whole_file.write, killed (SIGKILL, so that no ``finally`` runs) at the moment
named: before or after the Nth call of one os function (tests/unit/test_attest.py). ``--no-tmpfile``: as on a file
system that refuses O_TMPFILE (NFS)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from accelerate_warmup_patch import record_data, whole_file

FOLDER, FUNCTION, WHEN, NTH = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if "--no-tmpfile" in sys.argv:
    del os.O_TMPFILE
real = getattr(os, FUNCTION)
calls = []


def killed(*args: Any, **kwargs: Any) -> Any:
    calls.append(args)
    if len(calls) == NTH and WHEN == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    result = real(*args, **kwargs)
    if len(calls) == NTH and WHEN == "after":
        os.kill(os.getpid(), signal.SIGKILL)
    return result


setattr(os, FUNCTION, killed)
whole_file.write(FOLDER, record_data.RECORD_FILE, '{"record": 2, "whole": true}\n', record_data.PARTIAL)
