#%Module1.0
## accelerate-warmup-patch for Environment Modules (docs/deploy.md): the same as accelerate-warmup-patch.lua.
## deploy/install-prefix.sh puts this file at PREFIX/modulefiles-tcl/accelerate-warmup-patch/VERSION; the prefix is
## found from that place (copied elsewhere, set prefix to the install's folder instead).
module-whatis "accelerate-warmup-patch: DeepSpeed's warmup schedulers start at the warmup lr"
set prefix [file dirname [file dirname [file dirname $ModulesCurrentModulefile]]]
prepend-path PYTHONPATH $prefix/lib
prepend-path PYTHONPATH $prefix/site
prepend-path PATH $prefix/lib/bin
setenv ACCELERATE_WARMUP_PATCH reset
