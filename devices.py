"""Where and in what precision to run: the device, the dtype, the autocast context that applies it, and the pages
the decoding command lines' tensors live in (huge pages)."""

import contextlib
import os
import time
from collections.abc import Callable

import torch
from torch.nn import functional as F

from errors import UserError

DTYPES = ("auto", "float32", "bfloat16", "float16")
# bfloat16 is chosen on a CPU only when the probe's products run at least this much faster in it: the products
# are three quarters of the step, and the rest gains nothing or loses (its casts): a 1.31-1.35x faster probe came
# with a compiled step 1.0-1.06x faster on this repository's 2-core machine under load (README, Speed and quality).
BF16_MARGIN = 1.3
# Products of the probe, (rows, in_features, out_features), one Linear each
MatmulShape = tuple[int, int, int]
# The probe's rows and widths are capped here: enough for the kernels' speed per FLOP, and about 1 s at most for
# GPT-2 small (whose head alone would take seconds per call at full size)
PROBE_ROWS = 256


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
    """auto: bfloat16 on a GPU that has it, else float16 on a GPU; float32 elsewhere (choose_training_dtype
    probes a CPU's bfloat16 instead)."""
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
    fast either way (README, Speed). Torch reads the variable once, at its first allocation, so the decoding
    command lines call this before any tensor exists; elsewhere, set THP_MEM_ALLOC_ENABLE=1 yourself.
    """
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def autocast_context(device: torch.device, dtype: torch.dtype):
    """Mixed precision where asked; fp32 runs with no autocast at all."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def cpu_has_bfloat16() -> bool:
    """Whether this CPU runs bfloat16 matrix products natively (oneDNN's check: AVX-512 BF16 or AMX)."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def model_matmul_shapes(tokens: int, n_embd: int, vocab_size: int) -> list[MatmulShape]:
    """The training step's matrix products, one of each Linear of a Block and the head, for `tokens` rows (at
    most PROBE_ROWS; the head at most as wide as the MLP)."""
    rows = min(tokens, PROBE_ROWS)
    return [(rows, n_embd, 3 * n_embd), (rows, n_embd, n_embd), (rows, n_embd, 4 * n_embd),
            (rows, 4 * n_embd, n_embd), (rows, n_embd, min(vocab_size, 4 * n_embd))]


def matmul_probe_seconds(dtype: torch.dtype, shapes: list[MatmulShape], repeats: int = 2) -> float:
    """Best wall seconds of forward and backward through one Linear per shape, under autocast in dtype as
    training runs it (the weights' casts included: the model keeps float32 weights)."""
    generator = torch.Generator().manual_seed(0)  # its own: the probe leaves torch's random stream alone

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(size, generator=generator)

    tensors = [(randn(m, k), randn(n, k).requires_grad_(), randn(m, n)) for m, k, n in shapes]
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for x, weight, grad in tensors:
            with autocast_context(torch.device("cpu"), dtype):
                out = F.linear(x, weight)
            out.backward(grad.to(out.dtype))
        best = min(best, time.perf_counter() - started)
    return best


def probe_cpu_dtype(shapes: list[MatmulShape], timer: Callable[[torch.dtype, list[MatmulShape]], float]
                    = matmul_probe_seconds, supported: Callable[[], bool] = cpu_has_bfloat16,
                    rounds: int = 2) -> tuple[torch.dtype, str]:
    """float32 or bfloat16 for training on this CPU, and why: bfloat16 only where this CPU has it and the
    model's own products, timed in alternation (`rounds` each, the best counts), run BF16_MARGIN faster in it."""
    if not supported():
        return torch.float32, "this CPU has no native bfloat16"
    seconds = {torch.float32: float("inf"), torch.bfloat16: float("inf")}
    for _ in range(rounds):
        for dtype in seconds:
            seconds[dtype] = min(seconds[dtype], timer(dtype, shapes))
    fp32, bf16 = seconds[torch.float32], seconds[torch.bfloat16]
    timing = f"the model's matmuls took {bf16 * 1e3:.2f} ms in bfloat16, {fp32 * 1e3:.2f} ms in float32"
    if bf16 * BF16_MARGIN <= fp32:
        return torch.bfloat16, f"{timing} ({fp32 / bf16:.2f}x faster)"
    return torch.float32, f"{timing} (bfloat16 not {BF16_MARGIN:.1f}x faster)"


def choose_training_dtype(name: str, device: torch.device,
                          shapes: list[MatmulShape]) -> tuple[torch.dtype, str]:
    """choose_dtype, and why; auto on a CPU asks probe_cpu_dtype, over the products of the model's step."""
    dtype = choose_dtype(name, device)
    if name != "auto":
        return dtype, "as asked"
    if device.type != "cpu":
        return dtype, f"auto on {device.type}"
    dtype, why = probe_cpu_dtype(shapes)
    return dtype, f"auto: {why}"
