"""The one failure policy: every failure inside the patch goes through ``report``.

By default the patch fails open: one warning that says what failed and what still applies, and the
user's import or call goes on. With ACCELERATE_WARMUP_PATCH_STRICT set it raises instead, out of
the user's import or call, so that CI and image builds fail loudly.
"""

from __future__ import annotations

from . import log, settings


class PatchError(RuntimeError):
    """Something inside the patch failed, and ACCELERATE_WARMUP_PATCH_STRICT asks for an error."""


def report(key: str, what: str, error: BaseException, consequence: str) -> None:
    """Raise in strict mode; otherwise warn once per ``key``: "<what> failed (<error>); <consequence>"."""
    if settings.strict():
        if isinstance(error, (PatchError, settings.SettingsError)):
            raise error
        raise PatchError(f"accelerate_warmup_patch: {what} failed: {error!r}; {consequence}") from error
    log.warn_once(key, "%s failed (%r); %s", what, error, consequence)
