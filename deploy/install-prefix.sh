#!/usr/bin/env bash
# Install accelerate-warmup-patch into a shared prefix for an environment module (docs/deploy.md):
#
#   deploy/install-prefix.sh PREFIX WHEEL [PYTHON]
#
#   PREFIX/lib                  the package (pip install --target, with PYTHON: the Python the jobs run);
#                               PREFIX/lib/bin: the command
#   PREFIX/deps                 what it needs (wrapt, built for PYTHON): the sitecustomize puts it LAST on sys.path,
#                               so a job's own wrapt, where it has one, is the one it imports
#   PREFIX/site                 sitecustomize.py, which arms a job where the module sets ACCELERATE_WARMUP_PATCH
#                               (Python reads a .pth file only in a site folder, and PYTHONPATH's are not)
#   PREFIX/modulefiles          Lmod's modulefiles: module use PREFIX/modulefiles; module load accelerate-warmup-patch
#                               (reset), or accelerate-warmup-patch-warn (warn: a roll-out's first step)
#   PREFIX/modulefiles-tcl      the same for Environment Modules (Tcl): module use PREFIX/modulefiles-tcl
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 PREFIX WHEEL [PYTHON]" >&2
  exit 2
fi
prefix=$(mkdir -p "$1" && cd "$1" && pwd) wheel=$2 python=${3:-python3}
here=$(cd "$(dirname "$0")" && pwd)
version=$(basename "$wheel" | cut -d- -f2)
rm -rf "$prefix/lib" "$prefix/deps"
"$python" -m pip install --quiet --no-cache-dir --target "$prefix/deps" "$wheel"
mkdir -p "$prefix/lib"
# the package and its command to lib, on PYTHONPATH; its dependencies stay in deps, behind the job's own packages
mv "$prefix"/deps/accelerate_warmup_patch "$prefix"/deps/accelerate_warmup_patch-*.dist-info "$prefix/deps/bin" \
  "$prefix/lib/"
rm -f "$prefix/deps/accelerate_warmup_patch.pth"  # read only in a site folder: the sitecustomize does its job
mkdir -p "$prefix/site"
cp "$here/sitecustomize.py" "$prefix/site/sitecustomize.py"
# one modulefile per system, installed under two names: the folder's name gives the mode (reset, or warn)
for name in accelerate-warmup-patch accelerate-warmup-patch-warn; do
  mkdir -p "$prefix/modulefiles/$name" "$prefix/modulefiles-tcl/$name"
  cp "$here/modulefiles/accelerate-warmup-patch.lua" "$prefix/modulefiles/$name/$version.lua"
  cp "$here/modulefiles/accelerate-warmup-patch.tcl" "$prefix/modulefiles-tcl/$name/$version"
done
echo "installed $version in $prefix: module use $prefix/modulefiles (Lmod) or $prefix/modulefiles-tcl" \
  "(Environment Modules); module load accelerate-warmup-patch (or accelerate-warmup-patch-warn)"
