"""How a study scores a trained model: the test (or val) tokens cut into windows of each eval length, under the
non-overlapping and the sliding-window protocol (see ablate.py's docstring), every token scored exactly once; and
what the scored tokens stand for in bytes and characters, for bits per byte."""

import math
from collections.abc import Callable

import numpy as np
import torch
from torch.nn import functional as F

from layers.positions import encoding_of, t5_bucket
from model import GPT, GPTConfig
from study.config import AblateConfig
from text.tokenizer import bits_per_unit, from_description, token_byte_counts, token_char_counts
from training.devices import autocast_context


def target_counts(data: np.ndarray, description: dict) -> dict[str, int]:
    """How much text the scored targets data[1:] stand for: tokens, UTF-8 bytes and characters (the
    denominators of nats per token, bits per byte and bits per character)."""
    tokenizer = from_description(description)
    targets = np.asarray(data[1:], dtype=np.int64)
    return {"tokens": len(targets), "bytes": int(token_byte_counts(tokenizer)[targets].sum()),
            "chars": int(token_char_counts(tokenizer)[targets].sum())}


def bits_per(nats_per_token: float, counts: dict[str, int], unit: str) -> float:
    """A mean loss in nats per token as bits per byte (unit "bytes") or per character ("chars"): the same total
    information spread over the text the tokens stand for."""
    return bits_per_unit(nats_per_token, counts["tokens"], counts[unit])


def eval_lengths(block_size: int, multipliers: list[float]) -> list[int]:
    return sorted({max(1, round(m * block_size)) for m in multipliers})


def forward_pieces(n_targets: int, length: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """How the protocols cut the scored split: (start, size, scored_from) for each forward pass.

    The n_targets targets are cut into consecutive windows of `length` (the last one shorter). A window of at
    most `window` tokens is one forward; a longer one goes through pieces of `window` tokens advancing by
    `stride`: the first piece scores all its tokens, each later one the tokens past the previous piece's end.
    Tokens start+scored_from .. start+size-1 are scored by the piece, each exactly once.
    """
    pieces = []
    for window_start in range(0, n_targets, length):
        size = min(length, n_targets - window_start)
        if size <= window:
            pieces.append((window_start, size, 0))
            continue
        starts = [*range(0, size - window, stride), size - window]
        ends = [s + window for s in starts]
        pieces += [(window_start + s, window, 0 if i == 0 else ends[i - 1] - s) for i, s in enumerate(starts)]
    return pieces


def token_losses(losses_of: Callable, data: np.ndarray, length: int, window: int, stride: int,
                 batch_size: int) -> np.ndarray:
    """The loss of every target data[1:] of the scored split, as forward_pieces says; losses_of(x, y) -> (B, T)."""
    n_targets = len(data) - 1
    out = np.full(n_targets, np.nan)
    pieces = np.array(forward_pieces(n_targets, length, window, stride), dtype=np.int64)
    tokens = torch.from_numpy(np.asarray(data, dtype=np.int64))
    for size in np.unique(pieces[:, 1]):
        same = pieces[pieces[:, 1] == size]
        for batch in np.array_split(same, math.ceil(len(same) / batch_size)):
            targets, losses = piece_losses(losses_of, tokens, batch)
            out[targets] = losses
    assert not np.isnan(out).any(), "a token of the split was not scored"  # forward_pieces covers every target
    return out


def piece_losses(losses_of: Callable, tokens: torch.Tensor, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One forward of a batch of same-size pieces (start, size, scored_from) of tokens: the targets it scores
    (indices into tokens[1:], in text order) and their losses. score.py's streaming goes through it too."""
    size = batch[0, 1]
    index = torch.from_numpy(batch[:, :1] + np.arange(size)[None, :])
    losses = np.asarray(losses_of(tokens[index], tokens[index + 1]), dtype=np.float64)
    scored = np.arange(size)[None, :] >= batch[:, 2:3]
    return index.numpy()[scored], losses[scored]


def by_position(losses: np.ndarray, length: int) -> list[float]:
    """Mean loss at each position 0..length-1 of the windows (targets i sit at position i % length)."""
    positions = np.arange(len(losses)) % length
    return (np.bincount(positions, losses, minlength=length) / np.bincount(positions, minlength=length)).tolist()


def model_losses(model: GPT, device: torch.device, dtype: torch.dtype) -> Callable:
    @torch.no_grad()
    def losses_of(x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
        with autocast_context(device, dtype):
            logits, _ = model(x.to(device))  # uncached forward over the whole piece
        return F.cross_entropy(logits.float().transpose(1, 2), y.to(device), reduction="none").cpu().numpy()

    return losses_of


def sliding_geometry(ablate: AblateConfig, block_size: int) -> tuple[int, int]:
    """The sliding protocol's window and stride: by default block_size, and a quarter of the window."""
    window = ablate.sliding_window or block_size
    return window, ablate.sliding_stride or max(1, window // 4)


def untrained_buckets(plan: list, ablate: AblateConfig) -> list[str]:
    """untrained_bucket's line for each t5 setting of the plan's runs (a from_cell finetune aside) that is scored
    where its training never reached."""
    return [line for line in dict.fromkeys(untrained_bucket(run.model_config, ablate) for run in plan
                                           if not run.finetune) if line]


def untrained_bucket(model_config: GPTConfig, ablate: AblateConfig) -> str:
    """One line where a t5 model is scored at distances whose buckets training never reached (distances up to
    block_size - 1 train buckets up to t5_bucket(block_size - 1)); "" otherwise, and for every other encoding."""
    if model_config.pos_encoding != "t5":
        return ""
    block_size, buckets, reach = model_config.block_size, model_config.t5_num_buckets, model_config.t5_max_distance
    window, _ = sliding_geometry(ablate, block_size)
    farthest = max(protocol_window(p, n, window) for p in ablate.protocols
                   for n in eval_lengths(block_size, ablate.eval_multipliers)) - 1
    distances = torch.arange(max(farthest, block_size) + 1)
    bucket = t5_bucket(distances, buckets, reach)
    trained = int(bucket[block_size - 1])
    if int(bucket[farthest]) <= trained:
        return ""
    first = int(distances[bucket > trained][0])
    return (f"t5 with t5_max_distance={reach} at block_size={block_size} trains buckets 0..{trained} of "
            f"{buckets}; scoring distances up to {farthest} reads buckets {trained + 1}..{int(bucket[farthest])} "
            f"(distances {first} and more), never trained: give t5_max_distance <= {block_size} to train them all")


def protocol_window(protocol: str, length: int, window: int) -> int:
    return length if protocol == "nonoverlapping" else min(window, length)


def evaluate_model(model: GPT, data: np.ndarray, lengths: list[int], ablate: AblateConfig, device: torch.device,
                   dtype: torch.dtype) -> dict[str, dict[str, dict | None]]:
    """{protocol: {length: {"loss", "per_position"} or None where the model has no positions that far}}."""
    model.eval()
    window, stride = sliding_geometry(ablate, model.config.block_size)
    losses_of = model_losses(model, device, dtype)
    results: dict[str, dict[str, dict | None]] = {}
    for protocol in ablate.protocols:
        results[protocol] = {}
        for length in lengths:
            widest = protocol_window(protocol, length, window)
            if widest > (encoding_of(model.config).max_length() or widest):
                results[protocol][str(length)] = None  # a learned table has block_size rows
                continue
            same = results.get("nonoverlapping", {}).get(str(length)) if widest == length else None
            if same is None:
                losses = token_losses(losses_of, data, length, widest, stride, ablate.eval_batch_size)
                same = {"loss": float(losses.mean()), "per_position": by_position(losses, length)}
            results[protocol][str(length)] = same
    return results

