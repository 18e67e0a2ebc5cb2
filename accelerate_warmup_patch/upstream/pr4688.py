"""PR #4688 (DeepSpeed 0.12.4): WarmupCosineLR's first fixes, one release after the class came (0.12.3).

The constructor took ``math.log`` of the warmup_num_steps given, so 0 and 1 raised, where 0.12.4 takes it of
``max(2, n)``; and ``get_last_lr()`` came. Neither is backported: a constructor that raises stops the job before
the patch could act, and an API is no lr.
"""

from __future__ import annotations

from .unit import Change, Elsewhere, NotBackported, NotJudged, NotProbed, Unit

_NOT_RUN = "the release's own constructor raises first: the patch cannot run before it"

UNIT = Unit(pr="#4688", release="0.12.4", source="deepspeed/runtime/lr_schedules.py @ v0.12.3 and v0.12.4", changes=(
    Change("log_of_warmup_steps", "WarmupCosineLR", "__init__",
           "warmup_num_steps below 2 no longer raises (math.log of the raw argument)",
           probe=NotProbed("0.12.3 only, whose constructor raises on it: there is no lr to compare"),
           backport=NotBackported(f"0.12.3 only; {_NOT_RUN}"),
           judgement=NotJudged("a run that lacked it never built its scheduler: it took no step"),
           cases=Elsewhere("0.12.3 only, below every tier's release of WarmupCosineLR but the matrix's scheduler "
                           "tier, whose rows run the release's own class")),
    Change("get_last_lr", "WarmupCosineLR", "get_last_lr", "get_last_lr() exists",
           probe=NotProbed("an API, not an lr"),
           backport=NotBackported("0.12.3 only; an API, not an lr"),
           judgement=NotJudged("an API, not an lr: no step of a run that lacked it ran at another lr"),
           cases=Elsewhere("an API, not an lr: nothing to compare with the reference's")),
))
