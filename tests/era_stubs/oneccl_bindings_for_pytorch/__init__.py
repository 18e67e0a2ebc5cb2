"""Stand-in for Intel's oneCCL bindings, a binary package the registry does not carry.

DeepSpeed 0.9-0.13's CPU accelerator imports it at module top and uses nothing of it once its
comm backend is gloo (tests/era_shims.py). Only on sys.path while the harness runs such a release.
"""
