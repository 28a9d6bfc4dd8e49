"""Where and in what precision to run: the device, the dtype, the autocast context that applies it, and the pages
the decoding command lines' tensors live in (huge pages)."""

import contextlib
import os

import torch

from errors import UserError

DTYPES = ("auto", "float32", "bfloat16", "float16")
# Other work that fills a core's worth of the CPU: torch's threads then wait for each other at every parallel region
# behind it (beside two busy processes a 2-thread training took 1.75x one thread's time: docs/training.md)
BUSY_LOAD = 1.0


def busy_cpu_note(device: torch.device) -> str:
    """One line when this CPU is busy enough that torch's threads stall each other, with the way round it; "" when
    it is not (or the device is no CPU, or torch runs one thread). The thread count stays the user's choice: it
    changes the last digits, and the same command must give the same numbers."""
    threads, load = torch.get_num_threads(), os.getloadavg()[0]
    if device.type != "cpu" or threads < 2 or load < BUSY_LOAD:
        return ""
    return (f"note: this CPU is busy (load average {load:.1f} over the last minute; torch runs {threads} threads): "
            f"threads stall each other behind other work, so this run may be far slower than on one; "
            f"OMP_NUM_THREADS=1 before the command trains on one (its last digits differ from {threads} threads')")


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
    """auto: bfloat16 on a GPU that has it, else float16 on a GPU; float32 elsewhere. On a CPU, auto never times
    bfloat16 against float32: such a probe swung by 100x on a loaded machine and made one command train in either
    dtype from one start to the next. bfloat16 on a CPU is --dtype=bfloat16 (bench.py --what=train times both)."""
    if name not in DTYPES:
        raise UserError(f"dtype={name!r} must be one of {', '.join(DTYPES)}")
    if name == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if name == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError(f"dtype=bfloat16 is not supported by {torch.cuda.get_device_name(device)}; use float16")
    return getattr(torch, name)


def use_huge_pages() -> None:
    """Have torch back every CPU tensor of 2 MiB or more with transparent huge pages (Linux), unless the environment
    already decides (THP_MEM_ALLOC_ENABLE, 0 or 1): torch then advises the kernel to map such a tensor in 2 MiB pages.

    The compiled decode step streams its packed weights (MKL's format) once per token, and on this repository's
    2-core machine 4 KiB pages cost it 11%: 5.12 against 4.54 ms a step, while F.linear on the plain weights ran as
    fast either way (docs/benchmarks.md, "decoding, and huge pages in alternating processes"). Torch reads the
    variable once, at its first allocation, so the decoding command lines call this before any tensor exists;
    elsewhere, set THP_MEM_ALLOC_ENABLE=1 yourself.
    """
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def dtype_name(dtype: torch.dtype) -> str:
    """float32, bfloat16: how configs, records and tables name a dtype."""
    return str(dtype).removeprefix("torch.")


def autocast_context(device: torch.device, dtype: torch.dtype):
    """Mixed precision where asked; fp32 runs with no autocast at all."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
