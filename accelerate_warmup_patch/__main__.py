"""The command line: ``accelerate-warmup-patch {demo,doctor,status}`` (or ``python -m accelerate_warmup_patch``)."""

from __future__ import annotations

import argparse
import json
import sys

DESCRIPTION = ("Start DeepSpeed's warmup schedulers at the warmup lr on every release. "
               "Activate with ACCELERATE_WARMUP_PATCH=reset or `import accelerate_warmup_patch`.")
EPILOG = """exit codes:
  0  done; doctor: no problem found (or --strict not given)
  1  doctor --strict: a problem was found; demo: the patched run did not start at the warmup lr
  2  usage error; demo --plot without matplotlib"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accelerate-warmup-patch", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{demo,doctor,status}")
    demo = commands.add_parser("demo", help="train a tiny model on CPU unpatched and patched; print each step's lr")
    demo.add_argument("-v", "--verbose", action="store_true", help="show DeepSpeed's own output")
    demo.add_argument("--plot", metavar="PNG", help="also draw the lrs (needs the 'plot' extra: matplotlib)")
    doctor = commands.add_parser("doctor", help="installed versions, verdicts, and whether the patch would be active")
    doctor.add_argument("--json", action="store_true", help="machine-readable output (schema: docs/doctor.md)")
    doctor.add_argument("--strict", action="store_true",
                        help="exit 1 if a release is untested/unsupported or the patch would not be active")
    commands.add_parser("status", help="import deepspeed and accelerate, then print status() as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from . import demo as demo_module

        return demo_module.main(verbose=args.verbose, plot_path=args.plot)
    if args.command == "doctor":
        from . import doctor as doctor_module

        return doctor_module.main(as_json=args.json, strict=args.strict)
    return _status()


def _status() -> int:
    import contextlib
    import importlib

    import accelerate_warmup_patch

    for name in ("deepspeed", "accelerate.utils.deepspeed"):
        with contextlib.suppress(Exception):  # not installed here: status says so
            importlib.import_module(name)
    print(json.dumps(accelerate_warmup_patch.status(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
