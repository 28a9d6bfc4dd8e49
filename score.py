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

The text streams through: read --chunk_bytes at a time, cut only where its pieces tokenize as the whole text does,
and scored as its tokens arrive, so memory holds a few chunks and a batch of pieces whatever the text's length. It
is read twice: once to refuse, before any scoring, a text that is not UTF-8 or holds characters a char model
lacks (standard input, which can be read only once, is kept in a temporary file meanwhile), then to score it. A
bar of the bytes read shows on stderr when it is a terminal (--progress=False: none).
"""

import codecs
import contextlib
import json
import math
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TextIO

import numpy as np
import torch
from tqdm.auto import tqdm

from errors import OptionError, UserError, main_guard
from files import atomic_files, special_file_kind
from layers.positions import encoding_of
from options import REPEATED, parse_options
from sample import load_model
from study.evaluation import model_losses, piece_losses
from text.cuts import MAX_PIECE_FACTOR, MIN_FORCED_CUT, char_start_before_end, safe_cut
from text.tokenizer import CharTokenizer, Tokenizer, bits_per_unit, dropped_characters, token_byte_counts
from training.devices import choose_device, choose_dtype
from training.run_dir import Interrupted, StopRequest

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
    per_token_overwrite: bool = False  # replace a per_token file already there (refused without it)
    batch_size: int = 16  # pieces per forward pass
    chunk_bytes: int = 1 << 20  # text read and tokenized at a time; memory holds a few chunks, not the whole text
    progress: bool = True  # show a tqdm bar of the bytes read (on stderr, when it is a terminal)
    device: str = "auto"  # auto (cuda > mps > cpu) | cpu | cuda | cuda:N | mps
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16 (autocast)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol={self.protocol!r} must be one of {', '.join(PROTOCOLS)}")
        for name in ("window", "stride", "length"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0 (0: the default)")
        other = "sliding" if self.protocol == "nonoverlapping" else "nonoverlapping"
        for name in ("window", "stride") if self.protocol == "nonoverlapping" else ("length",):
            if getattr(self, name):
                raise ValueError(f"{name}={getattr(self, name)} does nothing under protocol={self.protocol} (it "
                                 f"is --protocol={other}'s); drop --{name}, or give --protocol={other}")
        if self.per_token_overwrite and not self.per_token:
            raise ValueError("per_token_overwrite=True does nothing without --per_token=FILE; drop it, or give the "
                             "file")
        if self.batch_size < 1 or self.chunk_bytes < 1:
            raise ValueError(f"batch_size={self.batch_size} and chunk_bytes={self.chunk_bytes} must be at least 1")
        if self.stride and self.window and self.stride > self.window:
            raise ValueError(f"stride={self.stride} is longer than window={self.window}: tokens between pieces "
                             "would go unscored; give a stride of at most the window")


def input_size(name: str) -> int:
    """The bytes of the file an --input names, checked before the model loads: a missing, special or empty file
    is a UserError."""
    file = Path(name)
    if file.is_dir():
        raise UserError(f"--input {name!r} is a folder, not a text file")
    if kind := special_file_kind(file):
        raise UserError(f"--input {name!r} is {kind}, not a regular file; give the path of a text file "
                        "(--input=- reads standard input)")
    if not file.is_file():
        raise UserError(f"--input {name!r} does not exist")
    if not (size := file.stat().st_size):
        raise UserError(f"--input {name!r} is empty")
    return size


def input_source(name: str) -> str:
    """An input as the messages name it."""
    return "standard input" if name == "-" else f"--input {name!r}"


def input_blocks(inputs: list[str], chunk_bytes: int, bar: tqdm, say_line_ends: bool) -> Iterator[bytes]:
    """The bytes of the inputs one after the other ('-': standard input), about chunk_bytes at a time, each file's
    line ends read as the preparers read a text (Python's text mode): \r\n and a lone \r are \n, said once per
    file on stderr when say_line_ends (the first of the two reads). A \r at a block's end waits for the next
    block's first byte; 0x0D is a carriage return wherever it is in UTF-8."""
    for name in inputs:
        source = input_source(name)
        held, carriage_returns = b"", 0
        for block in file_blocks(name, source, chunk_bytes, bar):
            carriage_returns += block.count(b"\r")
            block = held + block
            held = block[-1:] if block.endswith(b"\r") else b""
            if block := block[:len(block) - len(held)].replace(b"\r\n", b"\n").replace(b"\r", b"\n"):
                yield block
        if held:
            yield b"\n"
        if carriage_returns and say_line_ends:
            print(f"note: {source} holds {carriage_returns:,} carriage returns (Windows line ends): read as "
                  "newlines, as prepare.py reads a text", file=sys.stderr)


def file_blocks(name: str, source: str, chunk_bytes: int, bar: tqdm) -> Iterator[bytes]:
    """The bytes of one input, chunk_bytes at a time, checked to be UTF-8 as they are read: a piece of text may
    span two files, and its error must still name the file and the offset in it."""
    check, offset = codecs.getincrementaldecoder("utf-8")(), 0
    try:
        with contextlib.nullcontext(sys.stdin.buffer) if name == "-" else open(name, "rb") as file:
            while True:
                block = file.read(chunk_bytes)
                carried = len(check.getstate()[0])  # the bytes of a character the last block ended inside
                try:
                    check.decode(block, final=not block)
                except UnicodeDecodeError as e:
                    raise UserError(f"{source} is not UTF-8 text: byte {e.object[e.start]:#x} at offset "
                                    f"{offset - carried + e.start} cannot be decoded") from None
                if not block:
                    break
                offset += len(block)
                bar.update(len(block))
                yield block
    except OSError as e:
        raise UserError(f"{source} cannot be read: {e.strerror or e}") from None


def text_pieces(blocks: Iterable[bytes], chunk_bytes: int, any_character: bool) -> Iterator[str]:
    """The text of the blocks in pieces of about chunk_bytes, cut where the pieces' tokens are the whole text's:
    at any character start for a char tokenizer (any_character), else where GPT-2's pre-tokenization starts a
    piece whatever follows (text/cuts.py's safe_cut: a line or a word start; a stretch of
    max(MAX_PIECE_FACTOR * chunk_bytes, MIN_FORCED_CUT) bytes without one is cut at a character)."""
    pending, longest = bytearray(), max(MAX_PIECE_FACTOR * chunk_bytes, MIN_FORCED_CUT)
    for block in blocks:
        pending += block
        cut = char_start_before_end(pending) if any_character else safe_cut(pending, longest)
        if cut:
            yield pending[:cut].decode("utf-8")  # checked UTF-8 (input_blocks), cut at a character's start
            del pending[:cut]
    if pending:
        yield pending.decode("utf-8")


@contextlib.contextmanager
def checked_inputs(inputs: list[str], chunk_bytes: int, tokenizer: Tokenizer) -> Iterator[list[str]]:
    """The files to score, the text read through once before any scoring: one that is not UTF-8 (file_blocks)
    or holds characters the model's vocabulary lacks is refused then, not after the pieces before the fault are
    scored (dropping the characters would score another text). Standard input, which can be read only once, is
    kept meanwhile in a temporary file (as read: its line ends already newlines), which the files name in its
    place; memory holds a chunk."""
    counts: Counter[str] = Counter()
    first = ""  # where the first unknown character is: its input, line and column
    with tempfile.TemporaryDirectory(prefix="score-") as spool_dir:
        files = []
        for i, name in enumerate(inputs):
            files.append(name if name != "-" else str(Path(spool_dir) / f"stdin{i}.txt"))
            # line: 1-based; column: the characters of that line read so far
            decoder, line, column = codecs.getincrementaldecoder("utf-8")(), 1, 0
            with open(files[-1], "wb") if name == "-" else contextlib.nullcontext() as spool:
                for block in input_blocks([name], chunk_bytes, tqdm(disable=True), say_line_ends=True):
                    if spool:
                        keep(spool, block)
                    text = decoder.decode(block)  # a block may end inside a character
                    if missing := dropped_characters(text, tokenizer):
                        counts.update({c: text.count(c) for c in missing})
                        if not first:
                            at = min(text.index(c) for c in missing)
                            newlines = text.count("\n", 0, at)  # none: its line began in an earlier block
                            at_column = at - text.rfind("\n", 0, at) + (0 if newlines else column)
                            first = f"{input_source(name)}, line {line + newlines}, column {at_column}"
                    line += text.count("\n")
                    column = len(text) - text.rfind("\n") - 1 if "\n" in text else column + len(text)
        if counts:
            raise UserError(f"the text holds {''.join(sorted(counts))!r}, {sum(counts.values()):,} character(s) in "
                            f"all, the first at {first}, which the model's {tokenizer.vocab_size}-character "
                            "vocabulary does not have; dropping them would change the score, so nothing is scored: "
                            "remove or replace them in the text, or score a model trained on data with them")
        yield files


def keep(spool: BinaryIO, block: bytes) -> None:
    """A block of standard input written to its temporary file; a full disk there is one line."""
    try:
        spool.write(block)
    except OSError as e:
        raise UserError(f"standard input cannot be kept in a temporary file in {Path(spool.name).parent.parent} "
                        f"while it is checked: {e.strerror or e}; set TMPDIR to a folder with room, or give the "
                        "text as a file (--input=FILE)") from None


def next_pieces(position: tuple[int, int, int], known: int, final: bool, length: int, window: int,
                stride: int) -> tuple[list[tuple[int, int, int]], tuple[int, int, int]]:
    """study/evaluation.py's forward_pieces, as the targets arrive: the pieces (start, size, scored_from) that
    the first `known` targets settle (all the rest, when final: known is then all of them), from position
    (the window's start, the next piece's start, the end of the targets scored), and the position after them.
    A piece is settled once a target past it has arrived: only the last piece of a window aligns to its end."""
    window_start, start, scored_to = position
    pieces = []
    while window_start < known:
        size = min(length, known - window_start)
        settled = final or window_start + length <= known
        if settled and size <= window:
            pieces.append((window_start, size, 0))
        else:
            last = window_start + size - window
            while start < last:
                pieces.append((start, window, scored_to - start))
                scored_to, start = start + window, start + stride
            if not settled:
                break
            pieces.append((last, window, scored_to - last))
        window_start += length
        start = scored_to = window_start
    return pieces, (window_start, start, scored_to)


def scored_batches(chunks: Iterable[np.ndarray], length: int, window: int, stride: int,
                   batch_size: int) -> Iterator[tuple[np.ndarray, int, np.ndarray]]:
    """The pieces of next_pieces for a text whose tokens arrive in chunks, batch_size of one size at a time:
    (held, first, batch), held the tokens first, first + 1, ... of the text, batch the pieces' rows (start, size,
    scored_from) by index in the whole text. Only the tokens from the oldest piece not yet scored on are held:
    at most a batch of pieces and a chunk. A batch is full or the last of its size, whatever the chunks, so that
    every chunk size gives the same forwards."""
    held, first, position, batch = np.empty(0, dtype=np.int64), 0, (0, 0, 0), []
    chunks = iter(chunks)
    while True:
        chunk = next(chunks, None)
        if chunk is not None:
            held = np.concatenate([held, chunk])
        known = first + len(held) - 1
        pieces, position = next_pieces(position, known, chunk is None, length, window, stride)
        for piece in pieces:
            if batch and piece[1] != batch[0][1]:
                yield held, first, np.array(batch, dtype=np.int64)
                batch = []
            batch.append(piece)
            if len(batch) == batch_size:
                yield held, first, np.array(batch, dtype=np.int64)
                batch = []
        if chunk is None:
            if batch:
                yield held, first, np.array(batch, dtype=np.int64)
            return
        # The oldest token a piece still reads: the batch's first, the next piece's, or (before the next
        # piece, by less than a stride) a window's last piece, which ends where the text does, past `known`.
        keep = max(min(batch[0][0] if batch else position[1], known - window) - first, 0)
        held, first = held[keep:], first + keep


@contextlib.contextmanager
def per_token_file(path: str) -> Iterator[TextIO | None]:
    """The file to write each scored token to as it comes (None when path is empty); it replaces path only
    once the whole text is scored, so that a failure midway leaves no partial file."""
    if not path:
        yield None
        return
    with atomic_files(path) as [temp], temp.open("w", encoding="utf-8") as file:
        yield file


def write_tokens(file: TextIO, indices: np.ndarray, ids: np.ndarray, losses: np.ndarray,
                 tokenizer: Tokenizer) -> None:
    for index, token, value in zip(indices.tolist(), ids.tolist(), losses.tolist(), strict=True):
        file.write(json.dumps({"index": index, "id": token, "text": tokenizer.decode([token]),
                               "logprob": -value}) + "\n")


def geometry(config: ScoreConfig, block_size: int, max_length: int | None) -> tuple[int, int, int, str]:
    """(length, window, stride) of forward_pieces for the protocol, and the protocol said in words."""
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
    """The model's loss on the text, with what it stands for; writes per_token when asked. Ctrl-C or SIGTERM
    stops it at once (Interrupted, with the signal), per_token's file left as it was."""
    with StopRequest(what_is_left(config)) as stop, stop.interruptible():
        return score_text(config, stop.poll)


def what_is_left(config: ScoreConfig) -> str:
    """What a stopped score leaves, said by a first signal's line and a second's abort alike."""
    return "nothing scored" + (f"; --per_token {config.per_token!r} is as it was" if config.per_token else "")


def score_text(config: ScoreConfig, poll: Callable[[], None]) -> dict:
    """score() under its stop request: poll() between batches raises a signal's Interrupted again where its
    handler's raise was lost."""
    if not config.input:
        raise OptionError("no --input: give the text file to score (--input=FILE, repeatable; --input=- for stdin)")
    sizes = [None if name == "-" else input_size(name) for name in config.input]
    if config.per_token and Path(config.per_token).is_dir():  # else found by the rename, once the text is scored
        raise UserError(f"--per_token {config.per_token!r} is a folder; give the file to write, e.g. "
                        f"--per_token={Path(config.per_token) / 'tokens.jsonl'}")
    if config.per_token and Path(config.per_token).exists() and not config.per_token_overwrite:
        raise UserError(f"--per_token {config.per_token!r} is already there (scored before?); give "
                        "--per_token_overwrite=True to replace it, or another --per_token=FILE")
    device = choose_device(config.device)
    dtype = choose_dtype(config.dtype, device)
    model, tokenizer = load_model(config.init_from, config.out_dir)
    model.eval().to(device)
    length, window, stride, said = geometry(config, model.config.block_size,
                                            encoding_of(model.config).max_length())
    losses_of, byte_counts = model_losses(model, device, dtype), token_byte_counts(tokenizer)
    nats, tokens, scored_bytes = 0.0, 0, 0
    with checked_inputs(config.input, config.chunk_bytes, tokenizer) as files, \
            tqdm(total=None if None in sizes else sum(sizes), unit="B", unit_scale=True, unit_divisor=1024,
                 desc="scoring", disable=not (config.progress and sys.stderr.isatty())) as bar, \
            per_token_file(config.per_token) as per_token:
        pieces = text_pieces(input_blocks(files, config.chunk_bytes, bar, say_line_ends=False), config.chunk_bytes,
                             isinstance(tokenizer, CharTokenizer))
        chunks = (np.asarray(tokenizer.encode(piece), dtype=np.int64) for piece in pieces)
        for held, first, batch in scored_batches(chunks, length, window, stride, config.batch_size):
            poll()
            targets, losses = piece_losses(losses_of, torch.from_numpy(held), batch - [first, 0, 0])
            ids = held[targets + 1]
            nats += float(losses.sum())  # batches are the same for every chunk size, and so is this sum
            tokens += len(losses)
            scored_bytes += int(byte_counts[ids].sum())
            if per_token:
                write_tokens(per_token, first + targets + 1, ids, losses, tokenizer)
        if not tokens:
            raise UserError("the text is shorter than 2 tokens: scoring needs at least 2 (the first is context "
                            "only); give a longer text")
    loss = nats / tokens
    return {"loss": loss, "perplexity": math.exp(loss), "tokens": tokens, "bytes": scored_bytes,
            "bits_per_byte": bits_per_unit(loss, tokens, scored_bytes) if scored_bytes else math.nan,
            "protocol": said}


def main(argv: list[str]) -> None:
    (config,) = parse_options(argv, (ScoreConfig,), prog="score.py", description=__doc__)
    try:
        result = score(config)
    except Interrupted as stopped:
        print(f"interrupted ({signal.Signals(stopped.args[0]).name}): {what_is_left(config)}", file=sys.stderr)
        sys.exit(128 + stopped.args[0])  # the shell's convention: 130 for Ctrl-C, 143 for SIGTERM
    names = ", ".join(config.input)
    print(f"{names}: {result['tokens']:,} tokens scored ({result['bytes']:,} bytes), {result['protocol']}")
    print(f"loss {result['loss']:.4f} nats/token, perplexity {result['perplexity']:.3f}, "
          f"{result['bits_per_byte']:.4f} bits/byte")
    if config.per_token:
        print(f"each token's log-probability: {Path(config.per_token)}")


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
