"""Where and in what precision to run: the device, the dtype, and the autocast context that applies it."""

import contextlib

import torch

from errors import UserError

DTYPES = ("auto", "float32", "bfloat16", "float16")


def choose_device(name: str) -> torch.device:
    """auto: cuda, then mps, then cpu. A named device that this machine lacks is a UserError."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device={name!r} is not a device name; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise UserError(f"device={name!r} is not available: torch sees {count} CUDA GPU(s) here; use "
                            "--device=cpu or --device=auto")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"device={name!r} is not available (no Apple GPU here); use --device=cpu or --device=auto")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"device={name!r} is not supported; use auto, cpu, cuda, cuda:N or mps")
    return device


def choose_dtype(name: str, device: torch.device) -> torch.dtype:
    """auto: bfloat16 on a GPU that has it, else float16 on a GPU; float32 elsewhere."""
    if name not in DTYPES:
        raise UserError(f"dtype={name!r} must be one of {', '.join(DTYPES)}")
    if name == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if name == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError(f"dtype=bfloat16 is not supported by {torch.cuda.get_device_name(device)}; use float16")
    return getattr(torch, name)


def autocast_context(device: torch.device, dtype: torch.dtype):
    """Mixed precision where asked; fp32 runs with no autocast at all."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
