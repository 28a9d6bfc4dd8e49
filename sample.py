"""Sample from a trained model (or GPT-2 weights) with the KV cache:
    python sample.py --out_dir=out-shakespeare-char-cpu --start="ROMEO:" --stream
    python sample.py --init_from=/path/to/hf/gpt2 --start=FILE:prompt.txt --top_p=0.9
    python sample.py --out_dir=out-shakespeare-char --num_samples=8 --compile   # compiled decode step
"""

import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from checkpoint import check_init_from, load_pretrained, read_checkpoint
from dataset import read_text
from devices import autocast_context, choose_device, choose_dtype
from errors import UserError, main_guard
from generate import generate_stream
from model import GPT
from nanogpt import init_checkpoint
from options import parse_options
from tokenizer import GPT2Tokenizer, Tokenizer, from_description


@dataclass
class SampleConfig:
    out_dir: str = "out"  # the training run to sample from: its best.pt, else its ckpt.pt
    init_from: str = "resume"  # resume (a checkpoint in out_dir) | gpt2, ... | a local HF GPT-2 dir | a ckpt.pt
    start: str = "\n"  # the prompt, or FILE:path to read it from a file; empty: end-of-text (BPE) / newline (char)
    num_samples: int = 3  # samples, generated together as one batch
    max_new_tokens: int = 500  # tokens generated per sample
    temperature: float = 0.8  # divides the logits; 0 means greedy
    top_k: int | None = 200  # keep only the k most likely tokens; None: all
    top_p: float | None = None  # keep the smallest set of tokens whose probability reaches p; None: all
    slide: int | None = None  # tokens dropped when the context window is full; None: block_size // 2
    seed: int = 1337  # seeds the sampling: sample i draws from seed + i, so it comes out the same alone
    device: str = "auto"  # auto (cuda, then mps, then cpu) | cpu | cuda | mps
    dtype: str = "auto"  # auto (bfloat16/float16 on GPU, float32 elsewhere) | float32 | bfloat16 | float16
    stream: bool = False  # print the first sample's tokens as they come
    no_cache: bool = False  # run the whole window every step: the slow reference path
    compile: bool = False  # compile the decode step: faster tokens after a first call that compiles (6-15 s)

    def __post_init__(self) -> None:
        if self.num_samples < 1 or self.max_new_tokens < 0:
            raise ValueError(f"num_samples={self.num_samples} must be >= 1 and max_new_tokens="
                             f"{self.max_new_tokens} >= 0")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature={self.temperature} must be a finite number >= 0 (0 means greedy)")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k={self.top_k} must be >= 1, or None for all tokens")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1], or None for all tokens")
        if self.slide is not None and self.slide < 1:
            raise ValueError(f"slide={self.slide} must be >= 1, or None for block_size // 2")
        check_init_from(self.init_from, ("resume",))


def load_model(init_from: str, out_dir: str) -> tuple[GPT, Tokenizer]:
    """A model and the tokenizer its data was made with: the run's best.pt, or its ckpt.pt where best.pt is
    missing or unreadable (then said on stderr)."""
    if init_from != "resume" and init_checkpoint(init_from) is None:
        return load_pretrained(init_from), GPT2Tokenizer()
    if init_from != "resume":  # a checkpoint named by its file or folder: nanoGPT's ckpt.pt, or ours
        model, state = read_checkpoint(init_checkpoint(init_from))
        return model, from_description(state["tokenizer"])
    run = Path(out_dir)
    if run.exists() and not run.is_dir():
        raise UserError(f"out_dir={out_dir!r} is a file, not a run folder")
    best, latest = run / "best.pt", run / "ckpt.pt"
    if not best.exists():
        model, state = read_checkpoint(latest)
    else:
        try:
            model, state = read_checkpoint(best)
        except UserError as e:
            if not latest.exists():
                raise
            print(f"warning: {e}; sampling from {latest} instead", file=sys.stderr)
            model, state = read_checkpoint(latest)
    return model, from_description(state["tokenizer"])


def encode_prompt(tokenizer: Tokenizer, start: str, block_size: int) -> list[int]:
    """Prompt ids: text or FILE:path; empty starts from the tokenizer's start token; cropped to block_size."""
    if start.startswith("FILE:"):
        start = read_text(start.removeprefix("FILE:"), what="prompt file")
    ids = tokenizer.encode(start) if start else [tokenizer.start_token()]
    if len(ids) > block_size:
        print(f"warning: the prompt has {len(ids)} tokens; keeping its last block_size={block_size}",
              file=sys.stderr)
        ids = ids[-block_size:]
    return ids


def sample(model: GPT, tokenizer: Tokenizer, config: SampleConfig, on_text=None) -> list[str]:
    """num_samples continuations of the prompt (prompt included). on_text(piece) receives sample 0 as it grows."""
    device = next(model.parameters()).device
    prompt = encode_prompt(tokenizer, config.start, model.config.block_size)
    idx = torch.tensor([prompt] * config.num_samples, dtype=torch.long, device=device)
    generators = [torch.Generator(device=device).manual_seed(config.seed + i) for i in range(config.num_samples)]
    if config.slide is not None and config.slide > model.config.block_size:
        raise UserError(f"slide={config.slide} must be at most the model's block_size={model.config.block_size}")
    new_tokens = []

    def first_row_ids(stream):
        for next_tokens in stream:
            new_tokens.append(next_tokens)
            yield int(next_tokens[0, 0])

    with autocast_context(device, choose_dtype(config.dtype, device)):
        stream = generate_stream(model, idx, config.max_new_tokens, config.temperature, config.top_k,
                                 config.top_p, config.slide, use_cache=not config.no_cache, generator=generators,
                                 vocab_size=tokenizer.vocab_size, compile=config.compile)
        if on_text is None:
            new_tokens.extend(stream)  # the tokens stay on the device: no host sync per token
        else:
            on_text(tokenizer.decode(prompt))
            for piece in incremental_text(tokenizer, first_row_ids(stream)):
                on_text(piece)
    return [tokenizer.decode(row) for row in torch.cat([idx, *new_tokens], dim=1).tolist()]


def incremental_text(tokenizer: Tokenizer, ids) -> Iterator[str]:
    """The text of a stream of token ids, piece by piece: each token decoded once, not the whole text again.

    A piece ends where the bytes so far end a character; a token that ends inside a multi-byte character
    waits for the next. Whatever is pending at the end is sent too (as U+FFFD if it never completes).
    """
    pending = []
    for token in ids:
        pending.append(token)
        text = tokenizer.decode(pending)
        if not text.endswith("\ufffd"):
            yield text
            pending = []
    if pending:
        yield tokenizer.decode(pending)


def main(argv: list[str]) -> None:
    (config,) = parse_options(argv, (SampleConfig,), prog="sample.py", description=__doc__)
    device = choose_device(config.device)
    model, tokenizer = load_model(config.init_from, config.out_dir)
    model.eval().to(device)

    def show(piece: str) -> None:
        print(piece, end="", flush=True)

    started = time.perf_counter()
    samples = sample(model, tokenizer, config, on_text=show if config.stream else None)
    seconds = time.perf_counter() - started
    for number, text in enumerate(samples):
        if config.stream and number == 0:
            print()
        else:
            print(text)
        print("---------------")
    print(f"{config.num_samples * config.max_new_tokens / seconds:,.0f} tokens/s "
          f"({'no cache' if config.no_cache else 'KV cache'}"
          f"{', compiled decode step: its compilation included' if config.compile else ''})", file=sys.stderr)


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
