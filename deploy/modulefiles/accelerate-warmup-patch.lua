-- accelerate-warmup-patch for Lmod (docs/deploy.md): a job started after `module load accelerate-warmup-patch` runs
-- DeepSpeed's warmup schedulers at the lrs of DeepSpeed 0.19.8; `module unload` turns it off for later jobs.
-- deploy/install-prefix.sh puts this file at PREFIX/modulefiles/accelerate-warmup-patch/VERSION.lua; the prefix is
-- found from that place (copied elsewhere, set prefix to the install's folder instead).
whatis("Name: accelerate-warmup-patch")
whatis("Description: DeepSpeed's warmup schedulers start at the warmup lr (a backport of DeepSpeed #6597)")
help([[
Sets ACCELERATE_WARMUP_PATCH=reset and puts the package on PYTHONPATH, with a sitecustomize that arms every
Python started with site.py (not `python -S`; `python -E` and `-I` ignore PYTHONPATH). For a roll-out, set warn
first. The kill switch stays the job's: export ACCELERATE_WARMUP_PATCH=off after loading it.
Check: accelerate-warmup-patch doctor --strict
]])
local prefix = myFileName():match("^(.*)/modulefiles/[^/]+/[^/]+$")
prepend_path("PYTHONPATH", pathJoin(prefix, "lib"))
prepend_path("PYTHONPATH", pathJoin(prefix, "site"))  -- first: its sitecustomize, which runs any it hides
prepend_path("PATH", pathJoin(prefix, "lib", "bin"))
setenv("ACCELERATE_WARMUP_PATCH", "reset")  -- warn for a roll-out's first step
