"""Sample from a trained model (or GPT-2 weights) with the KV cache:
    python sample.py --out_dir=out-shakespeare-char-cpu --start="ROMEO:" --stream
    python sample.py --init_from=/path/to/hf/gpt2 --start=FILE:prompt.txt --top_p=0.9
    python sample.py --out_dir=out-shakespeare-char --num_samples=8 --compile   # compiled decode step
    python sample.py --out_dir=out-shakespeare-char --min_p=0.05 --repetition_penalty=1.2 --logprobs=3
"""

import errno
import json
import math
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from errors import OptionError, UserError, main_guard
from files import atomic_files
from gpt.generate import StopText, check_penalties, generate_stream, token_logprobs
from model import GPT
from options import REPEATED, flag_names, parse_options
from text.dataset import read_text
from text.tokenizer import GPT2Tokenizer, Tokenizer, dropped_characters, from_description
from training.checkpoint import SEED_LIMIT, check_init_from, load_pretrained, read_checkpoint
from training.devices import DTYPES, autocast_context, choose_device, choose_dtype, use_huge_pages
from training.nanogpt import init_checkpoint
from training.run_dir import BEST, CHECKPOINT

MAX_SAMPLES = 4096  # one batch: a generator, a cache row and a text each
MAX_NEW_TOKENS = 10**7


@dataclass
class SampleConfig:
    out_dir: str = "out"  # the training run to sample from: its best.pt, else its ckpt.pt
    init_from: str = "resume"  # resume (a checkpoint in out_dir) | gpt2, ... | a local HF GPT-2 dir | a ckpt.pt
    start: str = "\n"  # the prompt (\n \t \\: newline, tab, \), or FILE:path; empty: end-of-text (BPE) / newline
    num_samples: int = 3  # samples (of each prompt), generated together as one batch
    prompts_per_line: bool = False  # --start=FILE:path: each non-empty line a prompt of its own, all in one batch
    max_new_tokens: int = 500  # tokens generated per sample
    temperature: float = 0.8  # divides the logits; 0 means greedy
    top_k: int | None = 200  # keep only the k most likely tokens; None: all
    top_p: float | None = None  # keep the smallest set of tokens whose probability reaches p; None: all
    min_p: float = 0.0  # keep tokens at least min_p times as likely as the likeliest (after temperature, top_p); 0: off
    repetition_penalty: float = 1.0  # a counted token's logit / penalty if >= 0, * penalty if < 0 (HF, CTRL); 1: off
    frequency_penalty: float = 0.0  # subtracted from a token's logit once per time it is counted (OpenAI); 0: off
    presence_penalty: float = 0.0  # subtracted from the logit of every token counted at least once (OpenAI); 0: off
    penalty_last_n: int = 0  # the penalties count the last N tokens of prompt + generated text (not the window); 0: all
    slide: int | None = None  # tokens dropped when the context window is full; None: block_size // 2
    seed: int = 1337  # seeds the sampling: sample i draws from seed + i, so it comes out the same alone
    device: str = "auto"  # auto (cuda, then mps, then cpu) | cpu | cuda | mps
    dtype: str = "auto"  # auto (bfloat16/float16 on GPU, float32 elsewhere) | float32 | bfloat16 | float16
    stream: bool = False  # print the first sample's tokens as they come
    no_cache: bool = False  # run the whole window every step: the slow reference path
    compile: bool = False  # compile the decode step: faster tokens after a first call that compiles (6-15 s)
    stop: list[str] = field(default_factory=list, metadata=REPEATED)  # stop before this text (\n: newline); repeatable
    keep_stop: bool = False  # keep the stop text (or <|endoftext|>) at the end of the sample
    end_of_text_stops: bool = True  # <|endoftext|> ends a sample (BPE, GPT-2, char data with documents)
    logprobs: int | None = None  # write each drawn token's log-prob (the model's) and the K likeliest ones; None: off
    logprobs_file: str = ""  # where --logprobs writes (JSON lines); empty: logprobs.jsonl in the run's folder
    logprobs_overwrite: bool = False  # replace a logprobs_file already there (refused without it)

    def __post_init__(self) -> None:
        if not 1 <= self.num_samples <= MAX_SAMPLES:
            raise ValueError(f"num_samples={self.num_samples} must be in [1, {MAX_SAMPLES}]: the samples are one "
                             "batch; for more, run again with another --seed")
        if not 0 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} must be in [0, {MAX_NEW_TOKENS:,}] (every "
                             "token is kept in memory until the samples are printed)")
        if not 0 <= self.seed <= SEED_LIMIT - self.num_samples:
            raise ValueError(f"seed={self.seed} must be in [0, 2**64 - num_samples]: sample i draws from seed + i")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature={self.temperature} must be a finite number >= 0 (0 means greedy)")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k={self.top_k} must be >= 1, or None for all tokens")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1], or None for all tokens")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p={self.min_p} must be in [0, 1] (a fraction of the most likely token's "
                             "probability; 0 keeps every token)")
        check_penalties(self.repetition_penalty, self.frequency_penalty, self.presence_penalty, self.penalty_last_n)
        if self.logprobs is not None and self.logprobs < 0:
            raise ValueError(f"logprobs={self.logprobs} must be >= 0 (the likeliest tokens listed beside each one "
                             "drawn; 0: the drawn token alone), or None for no log-probabilities")
        if self.logprobs is None and (self.logprobs_file or self.logprobs_overwrite):
            given = "logprobs_file" if self.logprobs_file else "logprobs_overwrite"
            raise ValueError(f"{given} is a setting of --logprobs, which is off: it would do nothing; give "
                             "--logprobs=K, or drop it")
        if self.no_cache and self.compile:  # generate_stream compiles the cached step only
            raise ValueError("compile=True compiles the cached decode step, and no_cache=True runs the whole window "
                             "every step instead: compile would do nothing; drop --compile, or --no_cache")
        if self.slide is not None and self.slide < 1:
            raise ValueError(f"slide={self.slide} must be >= 1, or None for block_size // 2")
        if self.prompts_per_line and not self.start.startswith("FILE:"):
            raise ValueError("prompts_per_line=True reads prompts from a file, one per line; give --start=FILE:PATH "
                             "(or drop --prompts_per_line for the one prompt --start gives)")
        if self.start.startswith("FILE:") and not self.start.removeprefix("FILE:").strip():
            raise ValueError("start='FILE:' names no file; give --start=FILE:PATH, or the prompt's text itself")
        if "" in self.stop:
            raise ValueError("--stop='' would end every sample before it starts; give the text to stop at")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} must be one of {', '.join(DTYPES)}")
        check_init_from(self.init_from, ("resume",))


ESCAPES = {"\\n": "\n", "\\t": "\t", "\\r": "\r", "\\\\": "\\"}


def unescape(text: str) -> str:
    """A command line's text with the usual escapes read as their characters (\\n a newline, \\t a tab, \\\\ one
    backslash): a shell passes --stop='\\n' as a backslash and an n, which no sample ever holds. Any other
    backslash stays as it is."""
    return re.sub(r"\\[ntr\\]", lambda match: ESCAPES[match.group()], text)


def read_escapes(config: SampleConfig) -> SampleConfig:
    """config with unescape applied to the prompt and the stop texts (a FILE: prompt names a path: as given)."""
    start = config.start if config.start.startswith("FILE:") else unescape(config.start)
    return replace(config, start=start, stop=[unescape(text) for text in config.stop])


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
    best, latest = run / BEST, run / CHECKPOINT
    if not best.exists() and not latest.exists():
        where = "it holds" if run.is_dir() else "no such folder:"
        raise UserError(f"out_dir={out_dir!r} holds no run ({where} no {BEST} or {CHECKPOINT}); give --out_dir=<the "
                        "folder train.py wrote to> (its --out_dir), or --init_from=<a ckpt.pt, or gpt2>")
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


def encode_prompts(tokenizer: Tokenizer, config: SampleConfig, block_size: int) -> list[list[int]]:
    """The prompts' ids: --start's one prompt, or with prompts_per_line each non-empty line of its file."""
    if not config.prompts_per_line:
        return [encode_prompt(tokenizer, config.start, block_size)]
    path = config.start.removeprefix("FILE:")
    lines = [line for line in read_text(path, what="prompt file").splitlines() if line.strip()]
    if not lines:
        raise UserError(f"--start=FILE:{path} has no line with text: with --prompts_per_line=True each non-empty "
                        "line is a prompt")
    return [encode_prompt(tokenizer, line, block_size) for line in lines]


def encode_prompt(tokenizer: Tokenizer, start: str, block_size: int) -> list[int]:
    """Prompt ids: text or FILE:path; empty starts from the tokenizer's start token; cropped to block_size."""
    if start.startswith("FILE:"):
        start = read_text(start.removeprefix("FILE:"), what="prompt file")
    unknown = dropped_characters(start, tokenizer)
    if unknown and (kept := "".join(c for c in start if c not in unknown)):  # none kept: refused below
        print(f"note: {len(start) - len(kept)} character(s) of the prompt dropped, {unknown!r}: the model's "
              f"{tokenizer.vocab_size}-character vocabulary does not have them", file=sys.stderr)
        start = kept
    try:
        ids = tokenizer.encode(start) if start else [tokenizer.start_token()]
    except UserError as e:  # the default "\n" too, for a model of a text without newlines
        raise UserError(f"--start={start!r}: {e}; give a prompt of those, or --start='' to start from the "
                        "model's own first token") from None
    if start and (kept := tokenizer.decode(ids)) != start:  # a pattern edited by hand ("[a-z]+") skips the rest
        dropped = "".join(sorted((Counter(start) - Counter(kept)).keys()))
        raise UserError(f"--start={start!r}: the tokenizer drops {dropped!r} from it (its pre-tokenization pattern "
                        f"{getattr(tokenizer, 'pattern', '')!r} matches none of them), so the model would not see "
                        "them; give a prompt without them, or restore GPT-2's pattern (text/tokenizer.py's "
                        "GPT2_PATTERN) and prepare the data again")
    if len(ids) > block_size:
        print(f"warning: the prompt has {len(ids)} tokens; keeping its last block_size={block_size}",
              file=sys.stderr)
        ids = ids[-block_size:]
    return ids


def stop_ids(tokenizer: Tokenizer, config: SampleConfig) -> frozenset[int]:
    """The token ids that end a sample: <|endoftext|>, where the tokenizer has one and end_of_text_stops."""
    eot = getattr(tokenizer, "eot_token", None)
    return frozenset({eot}) if config.end_of_text_stops and eot is not None else frozenset()


def refuse_unstopped_keep_stop(config: SampleConfig, flags: set[str], tokenizer: Tokenizer | None = None) -> None:
    """--keep_stop=True where nothing can stop a sample (no --stop, and no <|endoftext|>: end_of_text_stops=False,
    or a tokenizer without one) would do nothing: refused as a flag (a config file's is not: it may be meant for
    the models with an <|endoftext|>). Without the tokenizer (before the model loads), only what the flags decide."""
    if "keep_stop" not in flags or not config.keep_stop or config.stop:
        return
    if config.end_of_text_stops and (tokenizer is None or stop_ids(tokenizer, config)):
        return
    why = "end_of_text_stops=False" if not config.end_of_text_stops else "this model's tokenizer has no <|endoftext|>"
    raise OptionError(f"keep_stop is a setting of the stops (--stop, <|endoftext|>), and this run has none (no --stop; "
                      f"{why}): it would do nothing; drop it, or give --stop=TEXT")


def sample(model: GPT, tokenizer: Tokenizer, config: SampleConfig, on_text=None) -> list[str]:
    """num_samples continuations of the prompt (prompt included), each ended by its first stop (config.stop,
    <|endoftext|>) if it has one; with prompts_per_line, num_samples of each line's prompt, prompt by prompt. on_text
    (piece) receives sample 0 as it grows, never past its stop."""
    return sample_and_count(model, tokenizer, config, on_text)[0]


def sample_and_count(model: GPT, tokenizer: Tokenizer, config: SampleConfig, on_text=None) -> tuple[list[str], int]:
    """sample(), and the number of tokens generated per sample (fewer than max_new_tokens when all stopped); with
    config.logprobs, each sample's tokens and their log-probabilities written to config.logprobs_file."""
    if config.logprobs is None:
        texts, steps, _ = draw(model, tokenizer, config, on_text)
        return texts, steps
    if config.logprobs > tokenizer.vocab_size:
        raise UserError(f"logprobs={config.logprobs} must be at most the vocabulary's {tokenizer.vocab_size} tokens; "
                        f"give --logprobs={tokenizer.vocab_size} or fewer")
    path = logprobs_path(config)
    check_writable(str(path), "logprobs_file")  # before the work, not after it
    if path.exists() and not config.logprobs_overwrite:
        raise UserError(f"{path} is already there (log-probabilities sampled before?); give --logprobs_overwrite=True "
                        "to replace it, or another --logprobs_file=PATH")
    steps_logprobs = []  # per step, the tokens and token_logprobs' tensors: on the device until the end

    def keep(logits: torch.Tensor, tokens: torch.Tensor) -> None:
        steps_logprobs.append((tokens, *token_logprobs(logits, tokens, config.logprobs)))

    texts, steps, kept = draw(model, tokenizer, config, on_text, keep)
    # Atomic: an earlier file of that name stays whole until the new one is (Ctrl-C while sampling keeps it).
    with atomic_files(path) as [temp], temp.open("w", encoding="utf-8") as file:
        for line in logprob_lines(tokenizer, steps_logprobs, kept):
            file.write(line + "\n")
    print(f"each token's log-probability: {path}", file=sys.stderr)
    return texts, steps


def logprobs_path(config: SampleConfig) -> Path:
    """Where --logprobs writes: logprobs_file as given, else logprobs.jsonl beside the model sampled (in out_dir, or
    in the folder of the checkpoint init_from names), never in whatever folder the command ran from."""
    if config.logprobs_file:
        return Path(config.logprobs_file)
    if config.init_from == "resume":
        return Path(config.out_dir) / "logprobs.jsonl"
    if init_checkpoint(config.init_from) is not None:
        return init_checkpoint(config.init_from).parent / "logprobs.jsonl"
    raise UserError(f"--logprobs: init_from={config.init_from!r} is no run of ours to write logprobs.jsonl beside; "
                    "give --logprobs_file=PATH")


def check_writable(path: str, flag: str) -> None:
    """A UserError naming the flag where path cannot be written (a folder, no such folder, no permission): tried
    with a temporary file beside it, so that a file already there is left as it is."""
    try:
        if Path(path).is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        tempfile.TemporaryFile(dir=Path(path).parent).close()
    except OSError as e:
        raise UserError(f"{flag}={path!r} cannot be written: {e.strerror}; give a writable --{flag}=PATH") from None


def draw(model: GPT, tokenizer: Tokenizer, config: SampleConfig, on_text=None,
         on_token=None) -> tuple[list[str], int, list[int]]:
    """The samples, the steps generated, and how many tokens each sample kept (up to the one that stopped it, which
    counts); on_token: generate_stream's."""
    device = next(model.parameters()).device
    prompts = [p for p in encode_prompts(tokenizer, config, model.config.block_size) for _ in range(config.num_samples)]
    if len(prompts) > MAX_SAMPLES or config.seed > SEED_LIMIT - len(prompts):
        raise UserError(f"{len(prompts) // config.num_samples} prompts x num_samples={config.num_samples} = "
                        f"{len(prompts)} rows: at most {MAX_SAMPLES} in one batch, and seed + rows below 2**64 (row "
                        "i draws from seed + i); split the prompt file, or lower --num_samples")
    idx, starts = left_padded(prompts, device)
    generators = [torch.Generator(device=device).manual_seed(config.seed + i) for i in range(len(prompts))]
    if config.slide is not None and config.slide > model.config.block_size:
        raise UserError(f"slide={config.slide} must be at most the model's block_size={model.config.block_size}")
    ends = stop_ids(tokenizer, config)
    with autocast_context(device, choose_dtype(config.dtype, device)):
        stream = generate_stream(model, idx, config.max_new_tokens, config.temperature, config.top_k,
                                 config.top_p, config.slide, use_cache=not config.no_cache, generator=generators,
                                 vocab_size=tokenizer.vocab_size, compile=config.compile, min_p=config.min_p,
                                 repetition_penalty=config.repetition_penalty,
                                 frequency_penalty=config.frequency_penalty, presence_penalty=config.presence_penalty,
                                 penalty_last_n=config.penalty_last_n, on_token=on_token, starts=starts)
        if on_text is None and not config.stop and not ends:  # the tokens stay on the device: no sync per token
            generated = torch.cat([idx[:, :0], *stream], dim=1).tolist()
            texts = [tokenizer.decode(prompt + row) for prompt, row in zip(prompts, generated, strict=True)]
            return texts, config.max_new_tokens, [config.max_new_tokens] * len(prompts)
        rows = [StopText(tokenizer.decode, tuple(config.stop), ends, config.keep_stop) for _ in prompts]
        kept = [0] * len(prompts)
        if on_text is not None:
            on_text(tokenizer.decode(prompts[0]))
        steps = 0
        for next_tokens in stream:
            steps += 1
            for number, (row, token) in enumerate(zip(rows, next_tokens[:, 0].tolist(), strict=True)):
                kept[number] += not row.done
                piece = row.push(token)
                if number == 0 and piece and on_text is not None:
                    on_text(piece)
            if all(row.done for row in rows):
                break
    last = rows[0].finish()
    if last and on_text is not None:
        on_text(last)
    for row in rows[1:]:
        row.finish()
    return [tokenizer.decode(prompt) + row.text for prompt, row in zip(prompts, rows, strict=True)], steps, kept


def left_padded(prompts: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The prompts as one batch (B, longest), each row's ids at its right end after padding (any id: the model
    never attends to it), and the column each row's text begins at (GPT.forward's starts); None when none is
    padded, as with one prompt (the model's path of every row from column 0)."""
    longest = max(map(len, prompts))
    starts = [longest - len(p) for p in prompts]
    idx = torch.tensor([[0] * start + p for start, p in zip(starts, prompts, strict=True)], dtype=torch.long,
                       device=device)
    return idx, torch.tensor(starts, device=device) if any(starts) else None


def logprob_lines(tokenizer: Tokenizer, steps_logprobs: list[tuple[torch.Tensor, ...]],
                  kept: list[int]) -> Iterator[str]:
    """One JSON object per token, sample by sample: {"sample", "index" (from 0 in its generated tokens), "id",
    "token" (its text), "logprob" (nats), "top_logprobs": the K likeliest as [{"id", "token", "logprob"}], likeliest
    first}: OpenAI's names, with the ids beside them. steps_logprobs: per step, the tokens (B, 1) and token_logprobs'
    (B, 1), (B, K), (B, K)."""
    if not steps_logprobs:
        return
    tokens, chosen, top_ids, top_values = (torch.stack(parts, dim=1).tolist()
                                           for parts in zip(*steps_logprobs, strict=True))
    for number, count in enumerate(kept):
        for index in range(count):
            token = tokens[number][index][0]
            top = [{"id": i, "token": tokenizer.decode([i]), "logprob": value}
                   for i, value in zip(top_ids[number][index], top_values[number][index], strict=True)]
            yield json.dumps({"sample": number, "index": index, "id": token, "token": tokenizer.decode([token]),
                              "logprob": chosen[number][index][0], "top_logprobs": top}, ensure_ascii=False)


def main(argv: list[str]) -> None:
    use_huge_pages()
    (config,) = parse_options(argv, (SampleConfig,), prog="sample.py", description=__doc__)
    config = read_escapes(config)
    flags = flag_names(argv)
    refuse_unstopped_keep_stop(config, flags)  # end_of_text_stops=False: before the model is looked for
    device = choose_device(config.device)
    model, tokenizer = load_model(config.init_from, config.out_dir)
    refuse_unstopped_keep_stop(config, flags, tokenizer)  # a tokenizer without <|endoftext|>: before any decoding
    model.eval().to(device)

    def show(piece: str) -> None:
        print(piece, end="", flush=True)

    started = time.perf_counter()
    samples, steps = sample_and_count(model, tokenizer, config, on_text=show if config.stream else None)
    seconds = time.perf_counter() - started
    for number, text in enumerate(samples):
        if config.stream and number == 0:
            print()
        else:
            print(text)
        print("---------------")
    print(f"{len(samples) * steps / seconds:,.0f} tokens/s "
          f"({'no cache' if config.no_cache else 'KV cache'}"
          f"{', compiled decode step: its compilation included' if config.compile else ''})", file=sys.stderr)


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
