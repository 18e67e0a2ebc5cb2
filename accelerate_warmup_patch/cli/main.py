"""The command line: ``accelerate-warmup-patch {doctor,demo,status,audit}`` (``python -m accelerate_warmup_patch``)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any

from .. import releases, upstream

# named in the help below
FIXED, FLOOR, REFERENCE = upstream.first_release(upstream.START), releases.DEEPSPEED_FLOOR, releases.BEHAVIOR_REFERENCE
DESCRIPTION = f"""\
DeepSpeed releases before {FIXED} run the first optimizer step of a WarmupLR, WarmupDecayLR or
WarmupCosineLR at the optimizer's lr instead of the warmup start. This package gives every
release from {FLOOR} on the lrs of DeepSpeed {REFERENCE}. Turn it on with ACCELERATE_WARMUP_PATCH=reset
in the job's environment, or `import accelerate_warmup_patch` first in the training script."""
EPILOG = """\
exit codes:
  0  done; doctor: nothing --strict fails on (or --strict not given)
  1  doctor --strict: the mode chosen cannot act on an affected job (not armed, off, a DeepSpeed too old
     for the patch; warn passes), or ACCELERATE_WARMUP_PATCH holds a value it does not accept; demo: the
     patched run did not start at the warmup lr; audit: a run is affected
  2  usage error, an unreadable --config, or what demo needs is missing (torch, DeepSpeed, matplotlib);
     doctor, status, demo: the python3 on PATH, which they answer for, cannot run the package (Python < 3.9);
     audit: no run is affected, and something could not be read (a PATH with no DeepSpeed checkpoint, an
     unreadable run, a folder that cannot be listed); audit --summarize: also a part missing, given twice,
     unfinished or another audit's, or a file it cannot read (whatever the runs' verdicts)
  130, 143  audit: stopped by SIGINT (Ctrl-C) or SIGTERM, after the runs judged so far and the summary
  141  the reader closed the output early (`| head`): the rest is dropped, nothing is printed, as for a tool
     that SIGPIPE ends (128 + 13)"""
BROKEN_PIPE = 141

DOCTOR = """\
Opens with one verdict line (the state), then the details: installed versions, the word per
scheduler class of what its code does (a number is not the code: a child imports torch and
deepspeed and asks the build's classes, 3-10 s, once per build; the answer is kept for that very
lr_schedules.py, by its sha256, and the next doctor or status reuses it, saying so), how a new
process of this environment would be armed, and whether the multi-node launcher would carry the
switch; which interpreters (python, -I, -E, -s, -S, and --python-flags) the switch reaches, asked
of each. --config reads your DeepSpeed config (or a TrainingArguments JSON / accelerate YAML
that names one) and prints the lr optimizer steps 0-3 use, unpatched and patched, computed with
the installed release's own scheduler class on a throwaway optimizer (no model, no training), in
a child interpreter that imports torch and DeepSpeed: 5-15 s, said on stderr while it runs."""
DOCTOR_EPILOG = """\
states (--strict exits 1 on the starred ones):
  affected-active, affected-not-active*, affected-warn, backports-active, backports-not-active*,
  backports-warn, fixed-upstream, not-affected (--config), untested, unsupported*, no-deepspeed, bad-value*
--strict fails where the mode chosen cannot act on an affected job (unset, off, not reaching the job's
interpreter, a release older than the table) or the value is not accepted; warn passes (the roll-out's
first step: jobs run unpatched and warn, as chosen).
"auto" values: the HF Trainer and accelerate fill them at run time; doctor says with what, fills
only warmup_min_lr (0) and warmup_max_lr (the optimizer's lr), and asks for the rest (--lr, --set)."""
DEMO = """\
Check this node: trains a tiny model for 6 optimizer steps with the installed DeepSpeed, on CPU
(DS_ACCELERATOR=cpu, also on a machine with a GPU), once with the patch off and once in reset
mode, each in a fresh interpreter, and prints the lr each step used. Needs torch and DeepSpeed.
Each run imports them (5-15 s; said on stderr while it runs); neither builds DeepSpeed's CPU
shared-memory comm op, which a single training process never uses."""
STATUS = """\
Without options: what a process started with this environment would do (the environment variable,
the .pth, sitecustomize), which interpreters the switch reaches, asked of each, and what the
build's scheduler classes do (asked as doctor asks them: 3-10 s once per build, then the answer
kept for its very code). --live starts such a process, imports deepspeed and accelerate in it
(5-15 s, said on stderr while it runs), and prints its status(): mode, wrappers, verdicts."""
AUDIT = f"""\
Reads the DeepSpeed checkpoints of finished runs (each PATH: a checkpoint folder with `latest`, one tag
folder, a Trainer output folder, or a folder of many runs, searched) and says per run, from its newest
tag: the release that wrote it, its scheduler, the lr optimizer step 0 ran at (from its earliest save, and
the record a patched run left there) and the lr DeepSpeed {REFERENCE} runs it at, and a verdict: affected, not
affected, unknown, unreadable, skipped (a symlinked folder, a run named twice); one per engine where a
folder holds the saves of several (accelerate's pytorch_model, pytorch_model_1). A PATH may be an fsspec
URL (s3://bucket/prefix: pip install fsspec s3fs, or the [s3] / [gcs] extra). Nothing a checkpoint's
pickle names is imported or run, no tensor is read, every read is bounded; needs neither torch nor
deepspeed. A ds_config saved as a path is read when absolute, or relative under
--config-root, as it is now: it may make a verdict worse or unknown, never clear a run. Each run is
written as soon as it is judged, a summary always at the end (on stderr with --json/--jsonl; an audit
that judged nothing says so and exits 2); Ctrl-C or SIGTERM stops it with every run judged so far
written whole, then the partial summary (exit 130 / 143)."""


PYTHON_FLAGS = ("the job's own interpreter flags, as one word with '=' (--python-flags=-S, --python-flags='-X dev'): "
                "the answer is for `python FLAGS train.py`, asked of such an interpreter")
NO_CACHE = ("ask the build's scheduler classes anew (3-10 s), neither reading nor writing the answers kept for each "
            "build's code in $XDG_CACHE_HOME/accelerate-warmup-patch (~/.cache)")
# Why this module knows CPython's option grammar: the answer for `python FLAGS train.py` comes from a child run
# as `python FLAGS -c CODE`. A letter that takes a value but lacks it would take our -c as its value, and -c or -m
# inside a group of letters would run something else; either way the child answers for another program, and a
# false "not armed" with exit status 0 is what the user would read. So each flag must end where its value ends,
# and a letter this Python does not have is named here rather than in the child's usage error. The grammar is
# the interpreter's own (Python/getopt.c and its -h, 3.9 to 3.13, each run); -P, added in 3.11, is its one change.
_PLAIN = "bBdEiIOqRsStuvx" + ("P" if sys.version_info >= (3, 11) else "")  # -P: Python 3.11
_TAKES_VALUE = {"X": "-X dev", "W": "-W error"}
_REFUSED = {"c": "-c runs code of its own instead of the script", "m": "-m runs a module instead of the script",
            "h": "-h prints the help and exits", "?": "-? prints the help and exits",
            "V": "-V prints the version and exits"}
_HASH_PYCS = ("default", "always", "never")  # --check-hash-based-pycs takes its value as the next word only


def _version() -> str:
    from .. import __version__

    return f"accelerate-warmup-patch {__version__}"


def _parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="accelerate-warmup-patch", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=raw)
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", title="commands", metavar="{doctor,demo,status,audit}")
    doctor = commands.add_parser("doctor", help="am I affected, and would a new process run patched?",
                                 description=DOCTOR, epilog=DOCTOR_EPILOG, formatter_class=raw)
    doctor.add_argument("--json", action="store_true", help="one JSON object on stdout (key 'state': the verdict)")
    doctor.add_argument("--strict", action="store_true",
                        help="exit 1 where the mode chosen cannot act on an affected job (not armed, off, a "
                             "release older than the table) or a value is not accepted; warn mode passes")
    doctor.add_argument("-v", "--verbose", action="store_true", help="also each multi-node runner's syntax")
    doctor.add_argument("--config", metavar="FILE",
                        help="a ds_config JSON, or a TrainingArguments JSON / accelerate YAML that names one")
    doctor.add_argument("--lr", type=float, help="the optimizer's lr, where the config says \"auto\" or has none")
    doctor.add_argument("--group-lrs", metavar="LR,LR", help="the param groups' lrs (default: one group at the lr)")
    doctor.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="a scheduler param, where the config says \"auto\" (e.g. warmup_num_steps=100)")
    doctor.add_argument("--python-flags", metavar="FLAGS", default="", help=PYTHON_FLAGS)
    doctor.add_argument("--no-cache", action="store_true", help=NO_CACHE)
    demo = commands.add_parser("demo", help="check this node: the installed DeepSpeed, unpatched and patched",
                               description=DEMO, formatter_class=raw)
    demo.add_argument("-v", "--verbose", action="store_true", help="show DeepSpeed's own output (on stderr)")
    demo.add_argument("--plot", metavar="PNG", help="also draw the lrs (needs matplotlib: the package's 'plot' extra)")
    status = commands.add_parser("status", help="what a process started with this environment would do",
                                 description=STATUS, formatter_class=raw)
    status.add_argument("--json", action="store_true", help="one JSON object on stdout")
    status.add_argument("--live", action="store_true", help="start such a process, import deepspeed in it, report")
    status.add_argument("--python-flags", metavar="FLAGS", default="", help=PYTHON_FLAGS)
    status.add_argument("--no-cache", action="store_true", help=NO_CACHE)
    audit = commands.add_parser("audit", help="were finished runs hurt? reads their DeepSpeed checkpoints",
                                description=AUDIT, formatter_class=raw)
    audit.add_argument("paths", metavar="PATH", nargs="+",
                       help="a checkpoint, tag, Trainer output or runs folder, or an fsspec URL of one")
    form = audit.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="a JSON list, one object per run, on stdout")
    form.add_argument("--jsonl", action="store_true",
                      help="JSON lines: one object per run on stdout, each written as soon as the run is judged")
    form.add_argument("--summarize", action="store_true",
                      help="each PATH is a file of --jsonl lines (- for stdin; the parts of a sharded audit, "
                           "merged): check that they are every shard of one audit, each once and finished (else "
                           "name each part that is not and exit 2), print their summary, exit as the audit would")
    audit.add_argument("--config-root", metavar="DIR",
                       help="the job's working directory: where a ds_config saved as a relative path is read "
                            "(a file read outside the checkpoint may make a verdict worse, never clear it)")
    audit.add_argument("--exclude", metavar="GLOB", action="append", default=[],
                       help="a folder not to enter, by name or by path under the PATH (repeatable: "
                            "--exclude wandb --exclude '*/hf_export')")
    audit.add_argument("-v", "--verbose", action="store_true",
                       help="a line for each symlinked folder not followed (else their count and the first three "
                            "in the summary)")
    audit.add_argument("--jobs", metavar="N", type=_positive, default=1,
                       help="judge runs in N worker processes (the same reports, in the same order)")
    audit.add_argument("--shard", metavar="K/N", type=_shard, default=(0, 1),
                       help="audit only shard K (from 0) of N: a stable split of the runs by their path under "
                            "the PATH, for a Slurm array (--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)")
    for sub in (doctor, demo, status, audit):
        sub.set_defaults(parser=sub)  # a typo among its options prints its own usage
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return value


def _shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        shard = (int(index), int(count))
    except ValueError:
        shard = (-1, 0)
    if not 0 <= shard[0] < shard[1]:
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N with 0 <= K < N (e.g. 0/4 ... 3/4)")
    return shard


# The commands that answer for an environment: the `accelerate-warmup-patch` script runs them on the Python jobs start.
ENVIRONMENT_COMMANDS = ("doctor", "status", "demo")


def command() -> int:
    """The ``accelerate-warmup-patch`` script: ``doctor``, ``status`` and ``demo`` answer for the Python that jobs
    start, the python3 on PATH (cli/job_python.py), which may not be the one this script runs on; the rest run here."""
    from . import job_python

    argv = sys.argv[1:]
    name = next((word for word in argv if not word.startswith("-")), None)
    if name in ENVIRONMENT_COMMANDS and not {"-h", "--help"} & set(argv):
        try:
            job_python.hand_over(argv)  # returns only where this interpreter is the jobs'
        except job_python.Unusable as error:
            print(f"accelerate-warmup-patch {name}: error: {error}", file=sys.stderr)
            return 2
    return main(argv)


def main(argv: list[str] | None = None) -> int:
    """Run a command; output cut by a closed pipe ends it quietly (the recipe of the signal module's docs)."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # inside the try: the last lines may still be in the buffer
    except BrokenPipeError:
        # the reader is gone: point stdout at devnull so that the interpreter's own flush at exit stays quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE
    return code


def _run(argv: list[str] | None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    command: argparse.ArgumentParser = getattr(args, "parser", parser)
    if extra:  # argparse would print the top-level usage for a subcommand's typo
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "audit":
        from . import audit as audit_module

        if args.summarize:
            return audit_module.summarize(args.paths)
        options = audit_module.Options(args.config_root, tuple(args.exclude), args.shard, args.jobs, args.verbose)
        form = "json" if args.json else "jsonl" if args.jsonl else "text"
        return audit_module.main(args.paths, form=form, options=options)
    if args.command == "demo":
        from . import demo as demo_module

        return demo_module.main(verbose=args.verbose, plot_path=args.plot)
    flags = _python_flags(command, args.python_flags)
    if args.command == "doctor":
        from . import doctor as doctor_module

        config_args = _config_args(parser, args) if args.config else None
        return doctor_module.main(as_json=args.json, strict=args.strict, verbose=args.verbose,
                                  config_args=config_args, python_flags=flags, cache=not args.no_cache)
    return _status(args.json, args.live, flags, cache=not args.no_cache)


def _python_flags(parser: argparse.ArgumentParser, raw: str) -> list[str]:
    """The job's interpreter options, each one the answer's own child can pass on as the job's interpreter
    reads it; anything else is a usage error that names it."""
    try:
        flags = shlex.split(raw)
    except ValueError as error:
        parser.error(f"--python-flags={raw}: {error}")
    problem = _flags_problem(flags)
    if problem is not None:
        parser.error(f"--python-flags={raw}: {problem}")
    return flags


def _flags_problem(flags: list[str]) -> str | None:
    """What in ``flags`` is not an option this command can pass on, in words, or None."""
    words = iter(flags)
    for word in words:
        if word == "--check-hash-based-pycs":
            if next(words, None) not in _HASH_PYCS:
                return f"{word!r} needs one of {', '.join(_HASH_PYCS)} after it"
            continue
        if word.startswith("--"):
            return f"{word!r} is not an option this command passes on (of the long ones, only --check-hash-based-pycs)"
        if not word.startswith("-") or word == "-":
            return (f"{word!r} is not an interpreter option: give only the options before the script (e.g. -S, -E, "
                    "-I, -X dev)")
        for at, letter in enumerate(word[1:], start=2):
            if letter in _TAKES_VALUE:
                if at == len(word) and next(words, None) is None:  # its value is the rest of the word, or the next
                    return f"'-{letter}' needs its value after it (as in {_TAKES_VALUE[letter]})"
                break
            if letter in _REFUSED:
                return f"{word!r}: {_REFUSED[letter]}"
            if letter not in _PLAIN:
                return f"{word!r}: -{letter} is not an option of Python {sys.version_info[0]}.{sys.version_info[1]}"
    return None


def _config_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    sets: dict[str, float] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            sets[key.strip()] = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            parser.error(f"--set {item}: expected KEY=NUMBER")
    try:
        group_lrs = [float(x) for x in args.group_lrs.split(",")] if args.group_lrs else None
    except ValueError:
        parser.error(f"--group-lrs {args.group_lrs}: expected numbers separated by commas")
    return {"path": args.config, "lr": args.lr, "group_lrs": group_lrs, "sets": sets}


def _status(as_json: bool, live: bool, flags: list[str], cache: bool) -> int:
    from . import status_report

    data = status_report.live(flags) if live else status_report.would(flags, cache)
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        status_report.print_text(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
