"""One rank of a two-rank job of a run history (tests/histories.py's ``job`` step, launched by torchrun from
tests/children/history.py): ``history_job.py SAVE_DIR OUT RUN_JSON``, RUN_JSON ``{"modes": [rank 0's, rank 1's],
"scheduler": ..., "zero": ...}``. Each rank arms the patch in its own mode (``off``: removed), trains a fresh engine
two steps, saves into SAVE_DIR (DeepSpeed's global_step2), and writes the lrs its own optimizer used at each step to
OUT/rank<r>.json."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the histories, how a rank ends
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # as tests/children/history.py
import accelerate_warmup_patch

RANK = int(os.environ["RANK"])
RUN = json.loads(sys.argv[3])
if RUN["modes"][RANK] == "off":
    accelerate_warmup_patch.remove()
else:
    accelerate_warmup_patch.apply(RUN["modes"][RANK])
# isort: off
import deepspeed  # after the arming
import histories
import torch
from accelerate_warmup_patch.cli.demo import StepLrs, torch_optimizer
from rank_end import end_rank
# isort: on

deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
module = torch.nn.Sequential(torch.nn.Linear(4, histories.MODELS["a"]))
engine, _, _, _ = deepspeed.initialize(model=module, model_parameters=list(module.parameters()),
                                       config=histories.config_of(RUN["scheduler"], RUN["zero"]))
seen = StepLrs(torch_optimizer(engine))
for _ in range(2):
    engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
    engine.step()
    seen.flush()
engine.save_checkpoint(sys.argv[1])
(Path(sys.argv[2]) / f"rank{RANK}.json").write_text(json.dumps(seen.rows))
end_rank()
