"""The harness's runs on a DeepSpeed build made by the test (tests/builds.py): ``build_run.py FOLDER SPEC...``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the harness
import builds

builds.use(Path(sys.argv[1]))
import harness

sys.exit(harness.main(sys.argv[2:]))
