"""Score a text with a trained model: how well the model predicts it, in nats per token, perplexity and bits per
byte, under a named protocol. The same evaluation as a study's (study/evaluation.py): scoring a split's text gives
the study's number for that split.
    python score.py --out_dir=out-shakespeare-char --input=poem.txt
    python score.py --init_from=gpt2 --input=poem.txt            # GPT-2's weights (offline: a local HF folder)
    python score.py --out_dir=RUN --input=a.txt --input=b.txt --protocol=nonoverlapping --per_token=tokens.jsonl
    cat notes.txt | python score.py --out_dir=RUN --input=-

The text is the files given, one after the other, tokenized with the model's own tokenizer. Its first token is
context only; every later one is scored once:
  sliding         (default) each token is predicted from at most --window tokens before it (itself included):
                  the text goes through in pieces of --window tokens that advance by --stride, the protocol of
                  a study's sliding window and of the usual perplexity of a long text
  nonoverlapping  the text cut into windows of --length tokens; a token sees the tokens before it in its window
Bits per byte divide the same information by the UTF-8 bytes the scored tokens stand for: comparable across
tokenizers ("my model against GPT-2 on my text").
"""

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from errors import OptionError, UserError, main_guard
from gpt.positions import encoding_of
from options import REPEATED, parse_options
from sample import load_model
from study.evaluation import model_losses, token_losses
from text.dataset import read_text
from text.tokenizer import bits_per_unit, token_byte_counts
from training.devices import choose_device, choose_dtype

PROTOCOLS = ("sliding", "nonoverlapping")


@dataclass
class ScoreConfig:
    out_dir: str = "out"  # the run to score with: its best.pt, else its ckpt.pt
    init_from: str = "resume"  # resume (the run in out_dir) | gpt2, gpt2-medium, ... | a local HF GPT-2 dir | a ckpt.pt
    input: list[str] = field(default_factory=list, metadata=REPEATED)  # a UTF-8 text file; repeatable; -: stdin
    protocol: str = "sliding"  # sliding | nonoverlapping (see above)
    window: int = 0  # sliding: the most tokens a prediction sees, itself included; 0: the model's block_size
    stride: int = 0  # sliding: how far each piece advances; 0: a quarter of the window
    length: int = 0  # nonoverlapping: tokens per window; 0: the model's block_size (more where its encoding allows)
    per_token: str = ""  # a JSON-lines file of every scored token: its index, id, text and log-probability (nats)
    batch_size: int = 16  # pieces per forward pass
    device: str = "auto"  # auto (cuda > mps > cpu) | cpu | cuda | cuda:N | mps
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16 (autocast)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol={self.protocol!r} must be one of {', '.join(PROTOCOLS)}")
        for name in ("window", "stride", "length"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0 (0: the default)")
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size} must be at least 1")
        if self.stride and self.window and self.stride > self.window:
            raise ValueError(f"stride={self.stride} is longer than window={self.window}: tokens between pieces "
                             "would go unscored; give a stride of at most the window")


def read_inputs(inputs: list[str]) -> str:
    """The text of the files given, one after the other ('-': standard input)."""
    if not inputs:
        raise OptionError("no --input: give the text file to score (--input=FILE, repeatable; --input=- for stdin)")
    texts = []
    for name in inputs:
        if name == "-":
            text = sys.stdin.buffer.read()
            try:
                texts.append(text.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise UserError(f"standard input is not UTF-8 text: byte {text[e.start]:#x} at offset {e.start} "
                                "cannot be decoded") from None
        else:
            texts.append(read_text(name, what="--input"))
    return "".join(texts)


def geometry(config: ScoreConfig, block_size: int, max_length: int | None) -> tuple[int, int, int, str]:
    """(length, window, stride) of token_losses for the protocol, and the protocol said in words."""
    if config.protocol == "sliding":
        window = config.window or block_size
        if window > block_size:
            raise OptionError(f"window={window} is longer than the model's block_size={block_size}, the context it "
                              f"was trained at; give --window={block_size} or less")
        stride = config.stride or max(1, window // 4)
        if stride > window:
            raise OptionError(f"stride={stride} is longer than window={window}: tokens between pieces would go "
                              "unscored; give a stride of at most the window")
        return sys.maxsize, window, stride, f"sliding window of {window} tokens, stride {stride}"
    length = config.length or block_size
    if max_length is not None and length > max_length:
        raise OptionError(f"length={length} is more positions than this model's encoding has ({max_length}: "
                          f"block_size); give --length={max_length} or less, or --protocol=sliding")
    return length, length, length, f"non-overlapping windows of {length} tokens"


def score(config: ScoreConfig) -> dict:
    """The model's loss on the text, with what it stands for; writes per_token when asked."""
    text = read_inputs(config.input)
    device = choose_device(config.device)
    dtype = choose_dtype(config.dtype, device)
    model, tokenizer = load_model(config.init_from, config.out_dir)
    model.eval().to(device)
    ids = np.asarray(tokenizer.encode(text), dtype=np.int64)
    if len(ids) < 2:
        raise UserError(f"the text is {len(ids)} token long: scoring needs at least 2 (the first is context only)")
    block_size = model.config.block_size
    length, window, stride, said = geometry(config, block_size, encoding_of(model.config).max_length())
    losses = token_losses(model_losses(model, device, dtype), ids, min(length, len(ids) - 1), window, stride,
                          config.batch_size)
    scored_bytes = int(token_byte_counts(tokenizer)[ids[1:]].sum())
    loss = float(losses.mean())
    if config.per_token:
        with open(config.per_token, "w", encoding="utf-8") as file:
            for index, (token, value) in enumerate(zip(ids[1:].tolist(), losses.tolist(), strict=True), 1):
                file.write(json.dumps({"index": index, "id": token, "text": tokenizer.decode([token]),
                                       "logprob": -value}) + "\n")
    return {"loss": loss, "perplexity": math.exp(loss), "tokens": len(losses), "bytes": scored_bytes,
            "bits_per_byte": bits_per_unit(loss, len(losses), scored_bytes) if scored_bytes else math.nan,
            "protocol": said}


def main(argv: list[str]) -> None:
    (config,) = parse_options(argv, (ScoreConfig,), prog="score.py", description=__doc__)
    result = score(config)
    names = ", ".join(config.input)
    print(f"{names}: {result['tokens']:,} tokens scored ({result['bytes']:,} bytes), {result['protocol']}")
    print(f"loss {result['loss']:.4f} nats/token, perplexity {result['perplexity']:.3f}, "
          f"{result['bits_per_byte']:.4f} bits/byte")
    if config.per_token:
        print(f"each token's log-probability: {Path(config.per_token)}")


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
