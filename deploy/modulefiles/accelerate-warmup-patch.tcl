#%Module1.0
## accelerate-warmup-patch for Environment Modules (docs/deploy.md): the same as accelerate-warmup-patch.lua.
## deploy/install-prefix.sh puts this file at PREFIX/modulefiles-tcl/accelerate-warmup-patch/VERSION, and again at
## PREFIX/modulefiles-tcl/accelerate-warmup-patch-warn/VERSION for a roll-out's first step: the folder's name gives
## the mode, and the prefix is found from that place (copied elsewhere, set prefix to the install's folder instead).
set folder [file dirname $ModulesCurrentModulefile]
set prefix [file dirname [file dirname $folder]]
if {[string match *-warn [file tail $folder]]} {set mode warn} else {set mode reset}
module-whatis "accelerate-warmup-patch: DeepSpeed's warmup schedulers start at the warmup lr, $mode mode"
## one of the two at a time (conflict: Environment Modules has family only from 5.2)
if {$mode eq {warn}} {conflict accelerate-warmup-patch} else {conflict accelerate-warmup-patch-warn}
prepend-path PYTHONPATH $prefix/lib
prepend-path PYTHONPATH $prefix/site
prepend-path PATH $prefix/lib/bin
## The user's value wins: the module sets ACCELERATE_WARMUP_PATCH only where it is unset (or blank), and notes in a
## variable of its own that it did, so that unloading takes back only its own value; a value set before the load (the
## kill switch off above all), or exported after it, stays. Unloading sets both to {}: within a `module switch`,
## Environment Modules keeps an unloaded value visible to the next modulefile unless it is empty.
set mark _ACCELERATE_WARMUP_PATCH_SET_BY_MODULE
proc awp_value {name} {
    global env
    if {[info exists env($name)]} {return $env($name)}
    return {}
}
if {[module-info mode remove]} {
    if {[awp_value $mark] ne {}} {
        if {[awp_value ACCELERATE_WARMUP_PATCH] eq [awp_value $mark]} {setenv ACCELERATE_WARMUP_PATCH {}}
        setenv $mark {}
    }
} elseif {[string trim [awp_value ACCELERATE_WARMUP_PATCH]] eq {}} {
    setenv ACCELERATE_WARMUP_PATCH $mode
    setenv $mark $mode
}
