"""One checkpoint format: a dict of tensors and plain values, written atomically, loaded without pickled code.

A checkpoint holds `model_args` (GPTConfig fields), `model` (state dict), `tokenizer` (the data's description,
so sampling needs no extra flag) and, for resuming, `optimizer`, `config`, `iter_num`, `best_val_loss` and `rng`.
"""

import os
import tempfile
from pathlib import Path

import torch

from model import GPT, GPTConfig


def save_checkpoint(state: dict, path: str | os.PathLike) -> None:
    """Write to a temporary file beside path, then rename: a crash mid-write leaves the old file intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location=map_location, weights_only=True)


def model_from_checkpoint(state: dict) -> GPT:
    model = GPT(GPTConfig(**state["model_args"]))
    model.load_state_dict(state["model"])
    return model
