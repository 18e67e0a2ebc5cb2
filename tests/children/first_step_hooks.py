"""The watch of the first optimizer step leaves no hook behind, with a user's own hooks before and after it
(tests/test_proof.py): prints the hooks left, the order the user's hooks ran in, and what the watch saw."""

import json

import torch

from accelerate_warmup_patch import step_watch


class Engine:
    """What the watch asks of an engine: its optimizer, step counts and scheduler (none here)."""

    def __init__(self) -> None:
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.optimizer = torch.optim.SGD([self.weight], lr=0.25)
        self.global_steps = 0
        self.skipped_steps = 0


engine = Engine()
ran: list[str] = []
engine.optimizer.register_step_pre_hook(lambda *_: ran.append("user pre, before"))
step_watch.watch(engine)
engine.optimizer.register_step_pre_hook(lambda *_: ran.append("user pre, after"))
engine.optimizer.register_step_post_hook(lambda *_: ran.append("user post"))
engine.weight.grad = torch.zeros(1)
for _ in range(3):
    engine.optimizer.step()
print(json.dumps({"pre": len(engine.optimizer._optimizer_step_pre_hooks),
                  "post": len(engine.optimizer._optimizer_step_post_hooks), "ran": ran,
                  "first_step": step_watch.first_step(engine)}))
