"""Records and runs as the package writes them, for the unit tier's audit and record tests: record 2 bound
to the model states beside it, a step 0 a patched process observed, a patched save."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files

from accelerate_warmup_patch import binding, loaded_record, record_data

COSINE = {"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0.0, "warmup_num_steps": 3,
                                               "total_num_steps": 8, "warmup_type": "linear"}}


def observed(lrs: list[Any], expected: list[Any] | None, *, deepspeed: str = "0.15.2",
             patch_did: str = "fixed") -> dict[str, Any]:
    """A step0 that a patched process saw its optimizer run (the run started there)."""
    return {"how": "observed", "deepspeed": deepspeed, "scheduler": "WarmupLR", "mode": "reset", "patch": "0.6.0",
            "lrs": lrs, "expected": expected, "patch_did": patch_did, "global_steps": 0}


def record2(tag: Path, step0: dict[str, Any], *, deepspeed: str = "0.15.2", global_steps: int = 6,
            mode: str = "reset", scheduler: str = "WarmupLR", bound: bool = True, **extra: Any) -> dict[str, Any]:
    """Record 2 as record_writer.py writes it, bound to the model states in ``tag`` as they are now."""
    return {"record": 2, "package": "accelerate-warmup-patch", "version": "0.6.0", "mode": mode,
            "deepspeed": deepspeed, "reference": "0.19.8", "global_steps": global_steps,
            "bound_to": binding.bind(str(tag)) if bound else binding.unbound("a checkpoint engine that "
                                                                                    "writes later"),
            "scheduler": {"class": scheduler, "step0": "fixed", "lrs_before": [0.001], "lrs_after": [0.0],
                          "why": "one plain sentence"},
            "first_step": None, "step0": step0, "loads": [], **extra}


def write_record(tag: Path, record: dict[str, Any]) -> None:
    (tag / record_data.RECORD_FILE).write_text(json.dumps(record, allow_nan=False))


def patched_run(save_dir: Path, step0: dict[str, Any], *, tag: str = "global_step6", global_steps: int = 6,
                version: str = "0.15.2", scheduler: dict[str, Any] | None = None, lr: float = 1e-3,
                **record: Any) -> Path:
    """A save of a patched process: the model states, then its record 2 bound to them."""
    files.write_run(save_dir, tag=tag, global_steps=global_steps, version=version, scheduler=scheduler, lr=lr)
    folder = save_dir / tag
    write_record(folder, record2(folder, step0, deepspeed=version, global_steps=global_steps,
                                 scheduler=(scheduler or {"type": "WarmupLR"})["type"], **record))
    return folder


def zero3_save(save_dir: Path, lr: float) -> Path:
    """A ZeRO-3-like save: the model-states file holds no weights (the same bytes for every run of one model), the
    optimizer's states file holds the trained partitions (``lr`` stands for what training made of them)."""
    files.write_run(save_dir, tag="global_step6")  # the same model states whatever the run trained
    tag = save_dir / "global_step6"
    (tag / "mp_rank_00_model_states.pt").rename(tag / "zero_pp_rank_0_mp_rank_00_model_states.pt")
    files.write_torch_zip(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                          {"optimizer_state_dict": {"lr": lr, "fp32": files.Tensor((16,))}})
    files.write_torch_zip(tag / "layer_01-model_states.pt", {"weight": files.Tensor((4, 4)), "lr": lr})
    return tag


def unrecorded(deepspeed: str | None, global_steps: int = 3) -> dict[str, Any]:
    return {"how": "unrecorded", "deepspeed": deepspeed, "global_steps": global_steps, "scheduler": "WarmupLR",
            "tag": "global_step3", "why": "the save it resumed from (global_step3) holds no record: step 0 ran "
                                         "unpatched, or patched by 0.4.0 or older"}


class Engine:
    """What loaded_record.loaded asks of an engine after a load: its step count and an optimizer (none here)."""

    optimizer = None

    def __init__(self, global_steps: int) -> None:
        self.global_steps = global_steps


def history_after_loading(folder: Path, record: dict[str, Any] | str) -> loaded_record.LoadedHistory:
    """What a stand-in engine holds after loading ``folder``, whose record is ``record`` (a dict, or raw text)."""
    text = record if isinstance(record, str) else json.dumps(record)
    (folder / record_data.RECORD_FILE).write_text(text)
    engine = Engine(6)
    loaded_record.loaded(engine, str(folder / "mp_rank_00_model_states.pt"), {"ds_version": "0.15.2"})
    history = loaded_record.history(engine)
    assert history is not None
    return history
