"""``python -m accelerate_warmup_patch``: the command line (cli/), as the ``accelerate-warmup-patch`` script runs it."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
