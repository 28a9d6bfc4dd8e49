"""What one GPU holds while training GPT-2 with AdamW, from the model's shapes: DDP against FSDP.

    python -m training.memory                  # docs/distributed.md's memory table: 124M to 13B, 8 GPUs,
                                               # micro-batch 8 x 1024 tokens
    python -m training.memory --micro_batch=4 --gpus=16 --gpu_gb=40

Mixed precision as train.py runs it on a GPU: fp32 weights, gradients and AdamW moments (16 bytes per parameter),
bf16 autocast for the matrix products, flash attention, dropout 0. DDP keeps all 16 bytes on every GPU (with
gradient_as_bucket_view, so its buckets are the gradients), plus the bf16 copies of the weight matrices that
autocast makes in the forward pass and keeps for the backward. FSDP keeps 16/N bytes per parameter, plus the
unsharded bf16 weights of the root group (token table, position table, final LayerNorm) and of two Blocks (the
one running and the one prefetched), and one Block's unsharded gradient before its reduce-scatter. Activations
are what autograd keeps, counted tensor by tensor for this model (tests/test_memory.py checks the count against
the bytes autograd saves on CPU), plus the logits' transient copies at the loss.

train.py asks the same counts before it builds a model: check_model_fits and check_batch_fits refuse a model or a
micro-batch that the memory here (device_memory) cannot hold, in one line before the first step, not as an
allocator's traceback or the kernel's OOM killer.
"""

import math
import os
import sys
import typing
from dataclasses import dataclass

import torch

from errors import UserError
from model import GPT, GPTConfig

# (n_layer, n_head, n_embd): GPT-2's four, then three of GPT-3's shapes (Brown et al., table 2.1) to find the limits
MODELS = {"gpt2": (12, 12, 768), "gpt2-medium": (24, 16, 1024), "gpt2-large": (36, 20, 1280),
          "gpt2-xl": (48, 25, 1600), "gpt3-2.7B": (32, 32, 2560), "gpt3-6.7B": (32, 32, 4096),
          "gpt3-13B": (40, 40, 5120)}


@dataclass
class MemoryConfig:
    micro_batch: int = 8  # sequences per micro-batch on each GPU
    block_size: int = 1024  # tokens per sequence
    gpus: int = 8  # GPUs that FSDP shards the state over
    gpu_gb: float = 80.0  # memory of one GPU in GB (10^9 bytes)

    def __post_init__(self) -> None:
        for name in ("micro_batch", "block_size", "gpus"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if not (math.isfinite(self.gpu_gb) and self.gpu_gb > 0):  # nan and inf pass a plain <= 0
            raise ValueError(f"gpu_gb={self.gpu_gb} must be a finite number > 0 (e.g. 80 for an 80 GB GPU)")


def gpt2_config(name: str, block_size: int = 1024) -> GPTConfig:
    n_layer, n_head, n_embd = MODELS[name]
    return GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size, vocab_size=50304)


def parameter_counts(config: GPTConfig) -> dict[str, int]:
    """Parameters in all, in one Block, in the root group, and in the matrices of the Linear layers (what
    autocast copies to bf16), counted on a model built on the meta device: shapes without memory."""
    with torch.device("meta"):
        model = GPT(config)
    total = model.get_num_params()
    block = sum(p.numel() for p in model.blocks[0].parameters())
    matrices = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return {"total": total, "block": block, "root": total - config.n_layer * block, "matrices": matrices}


def training_state_bytes(parameters: int, shards: int = 1) -> dict[str, float]:
    """fp32 weights, fp32 gradients and AdamW's two fp32 moments, spread over `shards` GPUs."""
    return {"weights": 4 * parameters / shards, "gradients": 4 * parameters / shards,
            "optimizer": 8 * parameters / shards}


def saved_activation_bytes(config: GPTConfig, tokens: int, checkpointing: bool = False) -> int:
    """What autograd keeps from the forward pass for the backward under bf16 autocast, weights excluded.

    Per Block and token: the fp32 residual stream at both LayerNorms (2 x 4h) and their mean and 1/std (16), the
    bf16 inputs of c_attn, attention's c_proj and c_fc (3 x 2h), q, k and v (6h), attention's log-sum-exp (4 per
    head), c_fc's output at the GELU and the GELU's output (2 x 8h): 36h + 4 n_head + 16 bytes. Outside the
    Blocks: the token ids (8), the final LayerNorm (4h + 8), the head's input (2h) and the log-softmax (4V).
    With checkpointing a Block keeps only its fp32 input, and one Block's activations exist at a time again.
    """
    h, vocab = config.n_embd, config.vocab_size
    block = 36 * h + 4 * config.n_head + 16
    outside = 8 + 4 * h + 8 + 2 * h + 4 * vocab
    blocks = config.n_layer * 4 * h + block if checkpointing else config.n_layer * block
    return tokens * (blocks + outside)


def device_memory(device: torch.device) -> int | None:
    """The bytes of memory on device (a GPU's, or the machine's RAM), where it can be known."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[1]
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else None


MAX_PARAMETERS = 2**50  # past this even the shapes overflow (torch cannot size the tensors, on meta either)


def check_model_fits(model_config: GPTConfig, device: torch.device, shards: int = 1) -> None:
    """Refuse a model whose weights, gradients and AdamW state (training_state_bytes, over `shards` processes
    under FSDP) exceed the memory here."""
    h = model_config.n_embd
    if 12 * model_config.n_layer * h * h + (model_config.vocab_size + model_config.block_size) * h > MAX_PARAMETERS:
        raise UserError(f"n_layer={model_config.n_layer}, n_embd={h} make more than 2**50 parameters, more than "
                        "any machine holds; choose a smaller model")
    parameters = parameter_counts(model_config)["total"]
    need = sum(training_state_bytes(parameters, shards).values())
    available = device_memory(device)
    if available and need > available:
        raise UserError(f"n_layer={model_config.n_layer}, n_embd={model_config.n_embd}, vocab_size="
                        f"{model_config.vocab_size} make {parameters // shards:,} parameters: about {need / 1e9:,.1f}"
                        f" GB to train, but {device} has {available / 1e9:,.1f} GB; choose a smaller model")


class BatchSettings(typing.Protocol):
    """What check_batch_fits reads of a run's settings (train.py's TrainConfig has these fields, among others)."""
    batch_size: int  # sequences per micro-batch
    gradient_accumulation_steps: int
    activation_checkpointing: bool


def check_batch_fits(config: BatchSettings, model_config: GPTConfig, device: torch.device) -> None:
    """Refuse a micro-batch whose activations (saved_activation_bytes, a lower bound: bf16 autocast), or a step
    whose batch offsets, cannot fit the memory here: found before the first step, not as an allocator's
    traceback or the kernel's OOM killer."""
    tokens = config.batch_size * model_config.block_size
    need = saved_activation_bytes(model_config, tokens, config.activation_checkpointing)
    need += 8 * config.gradient_accumulation_steps * config.batch_size  # a step's offsets, drawn at once
    available = device_memory(device)
    if available and need > available:
        raise UserError(f"batch_size={config.batch_size} x block_size={model_config.block_size} (x "
                        f"gradient_accumulation_steps={config.gradient_accumulation_steps}) need at least "
                        f"{need / 1e9:,.1f} GB for a step, but {device} has {available / 1e9:,.1f} GB; use a smaller "
                        "batch_size (or fewer gradient_accumulation_steps, or --activation_checkpointing=True)")


def per_gpu_bytes(config: GPTConfig, parallel: str, gpus: int, tokens: int, checkpointing: bool,
                  counts: dict[str, int] | None = None) -> dict[str, float]:
    """Everything one GPU holds at its peak, by kind. counts: parameter_counts(config), if already known."""
    counts = counts or parameter_counts(config)
    shards = gpus if parallel == "fsdp" else 1
    memory = training_state_bytes(counts["total"], shards)
    if parallel == "fsdp":
        memory["unsharded"] = 2 * counts["root"] + 2 * 2 * counts["block"] + (2 + 4) * counts["block"]
    else:
        memory["unsharded"] = 2 * counts["matrices"]  # autocast's bf16 copies
    # At the loss: the bf16 logits and their fp32 copy beside the log-softmax that autograd keeps.
    memory["activations"] = saved_activation_bytes(config, tokens, checkpointing) + tokens * 6 * config.vocab_size
    return memory


def gigabytes(value: float, limit: float) -> str:
    """In GB; bold when it exceeds the limit."""
    return f"**{value / 1e9:.1f}**" if value > limit else f"{value / 1e9:.1f}"


def memory_table(config: MemoryConfig) -> str:
    tokens, limit = config.micro_batch * config.block_size, config.gpu_gb * 1e9
    lines = [f"| model | parameters | weights + gradients + AdamW per GPU, DDP / FSDP×{config.gpus} | activations, "
             f"{config.micro_batch}×{config.block_size} tokens, checkpointing off / on | DDP total, off / on | "
             f"FSDP×{config.gpus} total, off / on |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    fits = {}
    for name in MODELS:
        model_config = gpt2_config(name, config.block_size)
        counts = parameter_counts(model_config)
        parameters = counts["total"]
        state = [sum(training_state_bytes(parameters, shards).values()) for shards in (1, config.gpus)]
        cells = {}
        for parallel in ("ddp", "fsdp"):
            for checkpointing in (False, True):
                memory = per_gpu_bytes(model_config, parallel, config.gpus, tokens, checkpointing, counts)
                cells["activations", checkpointing] = gigabytes(memory["activations"], limit)
                cells[parallel, checkpointing] = gigabytes(sum(memory.values()), limit)
                if sum(memory.values()) <= limit:
                    fits[parallel, checkpointing] = name
        pairs = [f"{cells[kind, False]} / {cells[kind, True]}" for kind in ("activations", "ddp", "fsdp")]
        lines.append(f"| {name} | {parameters / 1e6:,.0f}M | {gigabytes(state[0], limit)} / "
                     f"{gigabytes(state[1], limit)} | " + " | ".join(pairs) + " |")
    lines.append("")
    lines.append(f"GB of 10^9 bytes; bold: more than {config.gpu_gb:g} GB. The largest that fits: " + "; ".join(
        f"{parallel.upper()}, checkpointing {'on' if checkpointing else 'off'}: "
        f"{fits.get((parallel, checkpointing), 'none')}" for parallel in ("ddp", "fsdp")
        for checkpointing in (False, True)) + ".")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    from options import parse_options

    (config,) = parse_options(argv, (MemoryConfig,), prog="-m training.memory", description=__doc__)
    print(memory_table(config))


if __name__ == "__main__":
    from errors import main_guard

    main_guard(main, sys.argv[1:])
