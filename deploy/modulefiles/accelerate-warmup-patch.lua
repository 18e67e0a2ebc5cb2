-- accelerate-warmup-patch for Lmod (docs/deploy.md): a job started after `module load accelerate-warmup-patch` runs
-- DeepSpeed's warmup schedulers at the lrs of DeepSpeed 0.19.8; `module unload` turns it off for later jobs.
-- deploy/install-prefix.sh puts this file at PREFIX/modulefiles/accelerate-warmup-patch/VERSION.lua, and again at
-- PREFIX/modulefiles/accelerate-warmup-patch-warn/VERSION.lua for a roll-out's first step: the folder's name gives the
-- mode, and the prefix is found from that place (copied elsewhere, set prefix to the install's folder instead).
local folder = myFileName():match("^(.*)/[^/]+$")
local prefix = folder:match("^(.*)/modulefiles/[^/]+$")
local wanted = folder:match("%-warn$") and "warn" or "reset"
whatis("Name: " .. myModuleName())
whatis("Description: DeepSpeed's warmup schedulers start at the warmup lr (a backport of DeepSpeed #6597), " .. wanted
       .. " mode")
help([[
Sets ACCELERATE_WARMUP_PATCH (reset; warn in accelerate-warmup-patch-warn) unless it is already set: a value set
before the load, the kill switch `off` above all, wins, and `module unload` takes back only the module's own value.
Puts the package on PYTHONPATH with a sitecustomize that arms every Python started with site.py (not `python -S`;
`python -E` and `-I` ignore PYTHONPATH).
Check, in the job's environment: accelerate-warmup-patch doctor --strict
]])
-- one of the two at a time: loading the other swaps them
family("accelerate_warmup_patch")
prepend_path("PYTHONPATH", pathJoin(prefix, "lib"))
prepend_path("PYTHONPATH", pathJoin(prefix, "site"))  -- first: its sitecustomize, which runs any it hides
prepend_path("PATH", pathJoin(prefix, "lib", "bin"))
-- The user's value wins: the module sets ACCELERATE_WARMUP_PATCH only where it is unset (or blank), and notes in a
-- variable of its own that it did, so that unloading takes back only its own value; a value set before the load (the
-- kill switch off above all), or exported after it, stays. (Lmod's pushenv would leave its stack behind after an unload
-- where a value was set before the load, and bring that value back at a later load.)
local mark = "_ACCELERATE_WARMUP_PATCH_SET_BY_MODULE"
if mode() == "unload" then
  if os.getenv(mark) then
    if os.getenv("ACCELERATE_WARMUP_PATCH") == os.getenv(mark) then
      setenv("ACCELERATE_WARMUP_PATCH", wanted)  -- on unload: unset
    end
    setenv(mark, wanted)
  end
else
  local user = os.getenv("ACCELERATE_WARMUP_PATCH")
  if not (user and user:match("%S")) then
    setenv("ACCELERATE_WARMUP_PATCH", wanted)
    setenv(mark, wanted)
  end
end
