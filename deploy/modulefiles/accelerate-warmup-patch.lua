-- accelerate-warmup-patch for Lmod (docs/deploy.md): a job started after `module load accelerate-warmup-patch` runs
-- DeepSpeed's warmup schedulers at the lrs of DeepSpeed 0.19.8; `module unload` turns it off for later jobs.
-- deploy/install-prefix.sh puts this file at PREFIX/modulefiles/accelerate-warmup-patch/VERSION.lua, and again at
-- PREFIX/modulefiles/accelerate-warmup-patch-warn/VERSION.lua for a roll-out's first step: the folder's name gives the
-- mode, and the prefix is found from that place (copied elsewhere, set prefix to the install's folder instead).
local folder = myFileName():match("^(.*)/[^/]+$")
local prefix = folder:match("^(.*)/modulefiles/[^/]+$")
local mode = folder:match("%-warn$") and "warn" or "reset"
whatis("Name: " .. myModuleName())
whatis("Description: DeepSpeed's warmup schedulers start at the warmup lr (a backport of DeepSpeed #6597), " .. mode
       .. " mode")
help([[
Sets ACCELERATE_WARMUP_PATCH (reset; warn in accelerate-warmup-patch-warn) unless it is already set: a value set
before the load, the kill switch `off` above all, wins, and `module unload` gives back what was there before.
Puts the package on PYTHONPATH with a sitecustomize that arms every Python started with site.py (not `python -S`;
`python -E` and `-I` ignore PYTHONPATH).
Check, in the job's environment: accelerate-warmup-patch doctor --strict
]])
-- one of the two at a time: loading the other swaps them
family("accelerate_warmup_patch")
prepend_path("PYTHONPATH", pathJoin(prefix, "lib"))
prepend_path("PYTHONPATH", pathJoin(prefix, "site"))  -- first: its sitecustomize, which runs any it hides
prepend_path("PATH", pathJoin(prefix, "lib", "bin"))
-- The user's value wins over the module's mode, and pushenv restores the earlier value (or none) on unload.
local user = os.getenv("ACCELERATE_WARMUP_PATCH")
pushenv("ACCELERATE_WARMUP_PATCH", (user and user:match("%S")) and user or mode)
