#%Module1.0
## accelerate-warmup-patch for Environment Modules (docs/deploy.md): the same as accelerate-warmup-patch.lua.
## deploy/install-prefix.sh puts this file at PREFIX/modulefiles-tcl/accelerate-warmup-patch/VERSION, and again at
## PREFIX/modulefiles-tcl/accelerate-warmup-patch-warn/VERSION for a roll-out's first step: the folder's name gives
## the mode, and the prefix is found from that place (copied elsewhere, set prefix to the install's folder instead).
## Needs pushenv: Environment Modules 5.1 or newer, or Lmod.
set folder [file dirname $ModulesCurrentModulefile]
set prefix [file dirname [file dirname $folder]]
if {[string match *-warn [file tail $folder]]} {set mode warn} else {set mode reset}
module-whatis "accelerate-warmup-patch: DeepSpeed's warmup schedulers start at the warmup lr, $mode mode"
## one of the two at a time
family accelerate_warmup_patch
prepend-path PYTHONPATH $prefix/lib
prepend-path PYTHONPATH $prefix/site
prepend-path PATH $prefix/lib/bin
## The user's value wins over the module's mode, and pushenv restores the earlier value (or none) on unload.
## Environment Modules keeps the value from before its first pushenv as the entry "&VALUE" of the stack below; within
## a `module switch` the variable itself still holds what the module unloaded first had pushed, so where there is a
## stack, it tells what the user had set. (Lmod keeps its stack elsewhere, and a switch there leaves no such value.)
set stack __MODULES_PUSHENV_ACCELERATE_WARMUP_PATCH
set user {}
if {[info exists env($stack)]} {
    foreach entry [split $env($stack) :] {
        if {[string index $entry 0] eq {&}} {set user [string range $entry 1 end]}
    }
} elseif {[info exists env(ACCELERATE_WARMUP_PATCH)]} {
    set user $env(ACCELERATE_WARMUP_PATCH)
}
if {[string trim $user] eq {}} {set value $mode} else {set value $user}
pushenv ACCELERATE_WARMUP_PATCH $value
