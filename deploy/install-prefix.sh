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
#   PREFIX/modulefiles          the Lmod modulefile: module use PREFIX/modulefiles; module load accelerate-warmup-patch
#   PREFIX/modulefiles-tcl      the same for Environment Modules (Tcl)
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
mkdir -p "$prefix/site" "$prefix/modulefiles/accelerate-warmup-patch" "$prefix/modulefiles-tcl/accelerate-warmup-patch"
cp "$here/sitecustomize.py" "$prefix/site/sitecustomize.py"
cp "$here/modulefiles/accelerate-warmup-patch.lua" "$prefix/modulefiles/accelerate-warmup-patch/$version.lua"
cp "$here/modulefiles/accelerate-warmup-patch.tcl" "$prefix/modulefiles-tcl/accelerate-warmup-patch/$version"
echo "installed $version in $prefix: module use $prefix/modulefiles; module load accelerate-warmup-patch"
