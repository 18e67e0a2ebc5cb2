"""The ``train.py`` of the README's launch lines ("Turn it on"): each runs this file (tests/test_quickstart.py,
tests/test_launchers.py), on CPU, armed by the environment alone (the script never imports the package).

    torchrun ... train.py --deepspeed ds_config.json   one rank of the HF Trainer with a DeepSpeed config (a tiny
                                                       GPT-2 built from a config: no download)
    torchrun ... train.py / deepspeed ... train.py      one rank of tests/launched.py: deepspeed.initialize
    accelerate launch --use_deepspeed ... train.py  one rank of tests/launched.py through accelerate's Accelerator

Each rank writes the lr its optimizer steps 0-3 used to ``$AWP_LAUNCH_OUT/rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def trainer(ds_config: str) -> list[list[float]]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=16))
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (32, 8))]
    rows: list[list[float]] = []

    class Record(TrainerCallback):  # type: ignore[misc]
        optimizer: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            optimizer = kwargs["optimizer"]
            while hasattr(optimizer, "optimizer"):  # accelerate's and DeepSpeed's wrappers
                optimizer = optimizer.optimizer
            optimizer.register_step_pre_hook(
                lambda opt, *_: rows.append([float(g["lr"]) for g in opt.param_groups]))

    with tempfile.TemporaryDirectory(prefix="awp-quickstart-") as scratch:
        args = TrainingArguments(output_dir=scratch, deepspeed=ds_config, learning_rate=1e-3, warmup_steps=5,
                                 max_steps=4, per_device_train_batch_size=2, lr_scheduler_type="linear",
                                 report_to=[], save_strategy="no", disable_tqdm=True, seed=0)
        Trainer(model=model, args=args, train_dataset=data, callbacks=[Record()]).train()
    return rows


def main() -> int:
    if "--deepspeed" in sys.argv:
        rows = trainer(sys.argv[sys.argv.index("--deepspeed") + 1])
        out = Path(os.environ.get("AWP_LAUNCH_OUT", "."))
        (out / f"rank{os.environ.get('RANK', '0')}.json").write_text(json.dumps(rows))
        import rank_end

        rank_end.end_rank()  # CPU DeepSpeed can abort in the interpreter's teardown (tests/rank_end.py)
    import launched

    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":  # set by accelerate launch
        sys.argv.append("--accelerate")
    return launched.main()


if __name__ == "__main__":
    sys.exit(main())
