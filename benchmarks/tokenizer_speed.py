"""bench.py --what=tokenizer: on one text, GPT-2's and a BPE learned from all of the text for each vocabulary
size: seconds to learn, MB/s of tiktoken's and of HF's own encoder, and tokens per UTF-8 byte."""

import statistics

import torch

from benchmarks.common import BenchConfig, bench_clock, figure
from errors import UserError
from text.bpe_train import MIN_VOCAB_SIZE, learn_bpe, train_hf
from text.dataset import read_text
from text.tokenizer import GPT2Tokenizer


def tokenizer_text(bench: BenchConfig) -> tuple[str, str]:
    """(path, text) that --what=tokenizer measures on; a missing or unreadable file, or a vocabulary the text is too
    short to learn, is the user's to fix, found before anything is timed."""
    if not bench.input:
        raise UserError("--what=tokenizer needs a text: pass --input=PATH (a UTF-8 text file, e.g. Tiny "
                        "Shakespeare's input.txt)")
    path = bench.input
    text = read_text(path, "--input")
    size, merges = len(text.encode("utf-8")), max(bench.vocab_sizes) - MIN_VOCAB_SIZE
    if merges > size:  # each merge joins at least one pair of the text's bytes (as train_hf checks)
        raise UserError(f"vocab_sizes={bench.vocab_sizes}: {max(bench.vocab_sizes)} needs {merges:,} merges, more "
                        f"than the {size:,} bytes of {path} allow; use smaller --vocab_sizes or a longer --input")
    return path, text


def encode_rate(encode, text: str, clock, rounds: int) -> float:
    """MB/s (UTF-8 bytes) of encode(text), the median of rounds calls."""
    times = []
    for _ in range(rounds):
        started = clock()
        encode(text)
        times.append(clock() - started)
    return len(text.encode("utf-8")) / statistics.median(times) / 1e6


def bench_tokenizer(bench: BenchConfig, *_: object) -> tuple[str, list[dict]]:
    """(what was measured, in one line; the figures) of the tokenizer benchmark, in one process: a BPE learned
    from all of the text for each of vocab_sizes (learn_bpe timed; HF's trained tokenizer, learned again by
    train_hf, for its own encoder), then GPT-2's."""
    import tiktoken
    import tokenizers

    path, text = tokenizer_text(bench)
    size = len(text.encode("utf-8"))
    clock = bench_clock(bench, torch.device("cpu"))
    table, figures = "tokenizer", []
    for vocab_size in bench.vocab_sizes:
        started = clock()
        learned = learn_bpe([text], vocab_size, size, size, progress=False).encoding
        learn_seconds = clock() - started
        hf = train_hf([text], vocab_size, size, size, progress=False)
        row = f"bpe {vocab_size}"
        figures += [figure(table, row, "time to learn", learn_seconds, "s"),
                    figure(table, row, "tiktoken encode",
                           encode_rate(learned.encode_ordinary, text, clock, bench.rounds), "MB/s"),
                    figure(table, row, "HF's own encode", encode_rate(hf.encode, text, clock, bench.rounds), "MB/s"),
                    figure(table, row, "tokens per byte", len(learned.encode_ordinary(text)) / size, "tokens/byte")]
    gpt2 = GPT2Tokenizer().encoding  # the last row: a table's columns come in the order its first row has them
    row = f"GPT-2 ({gpt2.n_vocab:,})"
    figures += [figure(table, row, "tiktoken encode", encode_rate(gpt2.encode_ordinary, text, clock, bench.rounds),
                       "MB/s"),
                figure(table, row, "tokens per byte", len(gpt2.encode_ordinary(text)) / size, "tokens/byte")]
    return (f"{size:,} bytes of {path}, each BPE learned from all of it; clock {bench.clock}; encode MB/s the "
            f"median of {bench.rounds} calls on the whole text; tiktoken {tiktoken.__version__}, tokenizers "
            f"{tokenizers.__version__}"), figures
