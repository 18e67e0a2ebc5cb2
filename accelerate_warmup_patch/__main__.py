"""The command line: ``python -m accelerate_warmup_patch {demo,status,table}``."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="accelerate-warmup-patch", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="train a tiny model unpatched and patched; compare step lrs")
    demo.add_argument("-v", "--verbose", action="store_true", help="show DeepSpeed's own output")
    demo.add_argument("--plot", metavar="PNG", help="also draw the lrs (needs the 'plot' extra: matplotlib)")
    doctor = commands.add_parser("doctor", help="installed versions, verdicts, and whether the patch would run")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument("--strict", action="store_true",
                        help="exit 1 if a release is untested/unsupported or the patch would not be active")
    commands.add_parser("status", help="print status() as JSON, after importing deepspeed/accelerate")
    table = commands.add_parser("table", help="print the README's support table from the guard table")
    table.add_argument("--check", metavar="README", help="exit 1 if README's table is stale")
    table.add_argument("--write", metavar="README", help="regenerate README's table in place")
    table.add_argument("--results", metavar="JSON", help="matrix results to include (matrix/results.json)")
    commands.add_parser("_demo-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.command == "demo":
        from . import demo as demo_module

        return demo_module.main(verbose=args.verbose, plot_path=args.plot)
    if args.command == "_demo-child":
        from . import demo as demo_module

        demo_module.run_one()
        return 0
    if args.command == "doctor":
        from . import doctor as doctor_module

        return doctor_module.main(as_json=args.json, strict=args.strict)
    if args.command == "status":
        return _status()
    if args.command == "table":
        return _table(args.check, args.write, args.results)
    return 2


def _table(check: str | None, write: str | None, results_path: str | None) -> int:
    from pathlib import Path

    from . import table

    results = json.loads(Path(results_path).read_text()) if results_path else None
    if write:
        path = Path(write)
        path.write_text(table.rewrite(path.read_text(), results))
        return 0
    if check:
        if table.is_current(Path(check).read_text(), results):
            return 0
        extra = f" --results {results_path}" if results_path else ""
        print(f"{check}: the support table is stale; run: python -m accelerate_warmup_patch table "
              f"--write {check}{extra}", file=sys.stderr)
        return 1
    print(table.markdown(results))
    return 0


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
