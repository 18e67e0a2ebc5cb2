#!/usr/bin/env bash
# Install accelerate-warmup-patch into a shared prefix for an environment module (docs/deploy.md):
#
#   deploy/install-prefix.sh PREFIX WHEEL [PYTHON]
#
#   PREFIX/lib                  the package and wrapt (pip install --target, with PYTHON: the Python the jobs run,
#                               since wrapt's extension is built for it); PREFIX/lib/bin: the command
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
"$python" -m pip install --quiet --no-cache-dir --upgrade --target "$prefix/lib" "$wheel"
mkdir -p "$prefix/site" "$prefix/modulefiles/accelerate-warmup-patch" "$prefix/modulefiles-tcl/accelerate-warmup-patch"
cp "$here/sitecustomize.py" "$prefix/site/sitecustomize.py"
cp "$here/modulefiles/accelerate-warmup-patch.lua" "$prefix/modulefiles/accelerate-warmup-patch/$version.lua"
cp "$here/modulefiles/accelerate-warmup-patch.tcl" "$prefix/modulefiles-tcl/accelerate-warmup-patch/$version"
echo "installed $version in $prefix: module use $prefix/modulefiles; module load accelerate-warmup-patch"
