"""Checks of the built distributions, and of the package a venv imports (``nox -s package``).

    python tests/check_dist.py DIST_DIR     the sdist's and the wheel's metadata and contents
    python tests/check_dist.py --installed  this interpreter imports the installed wheel, .pth included
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _declared_version() -> str:
    for line in (ROOT / "accelerate_warmup_patch" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=")[1].strip().strip('"')
    raise LookupError("no __version__ in accelerate_warmup_patch/__init__.py")


def check_wheel(wheel: Path, version: str) -> list[str]:
    problems = []
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        pth = archive.read("accelerate_warmup_patch.pth").decode() if "accelerate_warmup_patch.pth" in names else ""
        info_text = archive.read(f"accelerate_warmup_patch-{version}.dist-info/METADATA").decode()
    info = f"accelerate_warmup_patch-{version}.dist-info"
    wanted = ["accelerate_warmup_patch.pth", "accelerate_warmup_patch/__init__.py", "accelerate_warmup_patch/py.typed",
              "accelerate_warmup_patch/cli/main.py",
              f"{info}/METADATA", f"{info}/entry_points.txt", f"{info}/licenses/LICENSE"]
    problems += [f"wheel lacks {name}" for name in wanted if name not in names]
    problems += [f"wheel ships {name}" for name in names
                 if name.startswith(("tests/", "benchmarks/", "matrix/", "deploy/", "sitecustomize"))]
    if pth.count("\n") > 1 or "ACCELERATE_WARMUP_PATCH" not in pth:
        problems.append(f"the .pth is not one line that checks ACCELERATE_WARMUP_PATCH: {pth!r}")
    metadata = Parser().parsestr(info_text)
    problems += _check_metadata(metadata, version)
    return problems


def _check_metadata(metadata: object, version: str) -> list[str]:
    get = metadata.get  # type: ignore[attr-defined]
    get_all = metadata.get_all  # type: ignore[attr-defined]
    problems = []
    if get("Name") != "accelerate-warmup-patch" or get("Version") != version:
        problems.append(f"name/version {get('Name')} {get('Version')}, expected accelerate-warmup-patch {version}")
    requires = get_all("Requires-Dist") or []
    if [r for r in requires if "extra ==" not in r] != ["wrapt>=1.14.1"]:
        problems.append(f"dependencies are {requires}, expected wrapt>=1.14.1 alone (plus extras)")
    if get("Requires-Python") != ">=3.9":
        problems.append(f"Requires-Python is {get('Requires-Python')}")
    if get("License-Expression") != "Apache-2.0":
        problems.append(f"License-Expression is {get('License-Expression')}")
    return problems


def check_sdist(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    wanted = ["LICENSE", "README.md", "CHANGELOG.md", "accelerate_warmup_patch.pth", "pyproject.toml",
              "accelerate_warmup_patch/__init__.py", "tests/test_activation.py", "deploy/sitecustomize.py",
              "deploy/install-prefix.sh"]
    return [f"sdist lacks {name}" for name in wanted if name not in names]


def check_installed() -> list[str]:
    import site

    import accelerate_warmup_patch

    problems = []
    where = Path(accelerate_warmup_patch.__file__).resolve()
    if where.parent == ROOT / "accelerate_warmup_patch" or "site-packages" not in where.parts:
        problems.append(f"this interpreter imports the checkout ({where}), not the installed wheel")
    if not any((Path(d) / "accelerate_warmup_patch.pth").is_file() for d in site.getsitepackages()):
        problems.append("no accelerate_warmup_patch.pth in site-packages")
    return problems


def main(argv: list[str]) -> int:
    if argv == ["--installed"]:
        problems = check_installed()
    else:
        dist, version = Path(argv[0]), _declared_version()
        problems = check_wheel(next(dist.glob("*.whl")), version) + check_sdist(next(dist.glob("*.tar.gz")))
    for problem in problems:
        print(f"check_dist: {problem}", file=sys.stderr)
    print("check_dist: ok" if not problems else f"check_dist: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
