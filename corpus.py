"""Corpora larger than memory: folders of text and JSON-lines files -> GPT-2 BPE train.bin, val.bin, tokenizer.json.

A .txt file is one document; each line of a .jsonl file is one, its text under `text_field` (the way web-scale
corpora are distributed). Every document is followed by <|endoftext|> and goes whole to train or to val, by a
seeded draw per document. Memory stays bounded whatever the corpus size: files are read in pieces of about
chunk_bytes, a few pieces per worker process are in flight, and tokens go straight to temporary files that are
renamed over the dataset only when everything succeeded.
"""

import glob
import json
import multiprocessing
import os
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from errors import UserError
from files import replace_files
from tokenizer import DATASET_FILES, GPT2Tokenizer, gpt2_encoding

SUFFIXES = (".txt", ".jsonl")


@dataclass
class CorpusConfig:
    input: str = ""  # a folder (its .txt and .jsonl files, recursively), a glob such as 'web/*.jsonl', or one file
    out_dir: str = ""  # where train.bin, val.bin and tokenizer.json go; empty: data/corpus
    text_field: str = "text"  # the field of each JSON line that holds the document's text
    val_fraction: float = 0.001  # share of the documents, drawn at random (seeded), held out for validation
    seed: int = 1337  # seeds the draw of the validation documents
    workers: int = 0  # tokenizer processes; 0: one per CPU core
    chunk_bytes: int = 1 << 20  # text sent to a worker at a time; a long .txt file is cut at line starts
    overwrite: bool = False  # replace a dataset already prepared in out_dir
    progress: bool = True  # show a tqdm bar of the bytes read

    def __post_init__(self) -> None:
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction={self.val_fraction} must be in (0, 1)")
        if self.workers < 0:
            raise ValueError(f"workers={self.workers} must be >= 0 (0: one per CPU core)")
        if self.chunk_bytes < 1:
            raise ValueError(f"chunk_bytes={self.chunk_bytes} must be at least 1")
        if not self.text_field:
            raise ValueError("text_field is empty: name the JSON field that holds the text, e.g. --text_field=text")


def corpus_files(input: str) -> list[Path]:
    """The files of a folder (recursively), of a glob pattern, or the one file named; sorted, so runs agree."""
    if not input:
        raise UserError("no --input: give a folder of .txt/.jsonl files, a glob such as 'web/*.jsonl', or a file")
    path = Path(input)
    if path.is_dir():
        files = [p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file()]
        if not files:
            raise UserError(f"folder {input!r} holds no .txt or .jsonl files")
    else:
        files = [path] if path.is_file() else [Path(p) for p in glob.glob(input, recursive=True)]
        files = [p for p in files if p.is_file()]
        if not files:
            raise UserError(f"input {input!r} is no file, folder, or glob pattern that matches a file")
        for file in files:
            if file.suffix not in SUFFIXES:
                raise UserError(f"input file {str(file)!r} is neither .txt (one document) nor .jsonl (one JSON "
                                 "object per line); rename it or choose the files with a glob such as '*.jsonl'")
    return sorted(files)


def line_start_before_end(data: bytes) -> int:
    """The last offset that follows a newline and holds a printable ASCII character other than space; 0 if none.

    GPT-2's pre-tokenizer never joins such a character to the whitespace before it, so a token always ends just
    before it: a text cut there encodes to the same tokens as the whole.
    """
    cut = data.rfind(b"\n", 0, len(data) - 1)
    while cut >= 0 and not 0x21 <= data[cut + 1] <= 0x7E:
        cut = data.rfind(b"\n", 0, cut)
    return cut + 1


def decode_utf8(data: bytes, path: Path, offset: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"input file {str(path)!r} is not UTF-8 text: byte {data[e.start]:#x} at offset "
                         f"{offset + e.start} cannot be decoded") from None


def text_pieces(path: Path, chunk_bytes: int) -> Iterator[tuple[str, int]]:
    """A text file as (text, bytes) pieces of about chunk_bytes each, cut only where tokens end anyway."""
    offset, pending = 0, b""
    with path.open("rb") as file:
        while block := file.read(chunk_bytes):
            pending += block
            cut = line_start_before_end(pending)
            if cut:
                yield decode_utf8(pending[:cut], path, offset), cut
                offset, pending = offset + cut, pending[cut:]
    if pending:
        yield decode_utf8(pending, path, offset), len(pending)


def jsonl_documents(path: Path, text_field: str) -> Iterator[tuple[str, int]]:
    """(text, bytes) of each line; blank lines give an empty text."""
    with path.open("rb") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                yield "", len(line)
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise UserError(f"{path}:{number}: not a JSON object ({e}); a .jsonl file holds one JSON object "
                                 "per line") from None
            text = record.get(text_field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                fields = sorted(record) if isinstance(record, dict) else []
                raise UserError(f"{path}:{number}: no text field {text_field!r} (the line has {fields}); name the "
                                 "field that holds the text with --text_field=NAME")
            yield text, len(line)


def pieces(files: list[Path], config: CorpusConfig) -> Iterator[tuple[bool, str, bool, int]]:
    """(is_val, text, ends_document, bytes read) over the corpus. Empty documents are skipped (bytes only)."""
    draw = random.Random(config.seed)
    for path in files:
        try:
            if path.suffix == ".jsonl":
                for text, size in jsonl_documents(path, config.text_field):
                    yield (draw.random() < config.val_fraction if text else False), text, bool(text), size
            elif path.stat().st_size:
                is_val = draw.random() < config.val_fraction
                for text, size in text_pieces(path, config.chunk_bytes):
                    yield is_val, text, False, size
                yield is_val, "", True, 0
        except OSError as e:  # unreadable, or gone since it was listed
            raise UserError(f"input file {str(path)!r} cannot be read: {e.strerror or e}") from None


def batches(stream: Iterator[tuple[bool, str, bool, int]], chunk_bytes: int) -> Iterator[tuple[bool, list, int]]:
    """Consecutive pieces of one split, about chunk_bytes of text together: (is_val, [(text, ends)], bytes)."""
    batch, batch_is_val, length, size = [], False, 0, 0
    for is_val, text, ends, piece_size in stream:
        size += piece_size
        if not text and not ends:
            continue
        if batch and (is_val != batch_is_val or length >= chunk_bytes):
            yield batch_is_val, batch, size - piece_size
            batch, length, size = [], 0, piece_size
        batch_is_val = is_val
        batch.append((text, ends))
        length += len(text)
    if batch or size:
        yield batch_is_val, batch, size


def encode_pieces(batch: list[tuple[str, bool]]) -> np.ndarray:
    """Runs in a worker: GPT-2 ids of each text (special-token strings are plain text), end-of-text after each
    document's last piece. uint16 holds GPT-2's 50257 ids and halves what travels back."""
    encoding = gpt2_encoding()  # tiktoken caches it: loaded once per worker
    ids = []
    for text, ends in batch:
        ids.extend(encoding.encode_ordinary(text))
        if ends:
            ids.append(encoding.eot_token)
    return np.array(ids, dtype=np.uint16)


def worker_count(requested: int) -> int:
    if requested:
        return requested
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def tokenize_corpus(files: list[Path], config: CorpusConfig, outputs: dict[bool, object], bar) -> dict:
    """Tokenize in worker processes, writing each batch's ids to outputs[is_val] in corpus order."""
    counts = {"train_tokens": 0, "val_tokens": 0, "train_documents": 0, "val_documents": 0}
    workers = worker_count(config.workers)

    def write(is_val: bool, result, documents: int, size: int) -> None:
        ids = result.get()
        ids.tofile(outputs[is_val])
        split = "val" if is_val else "train"
        counts[f"{split}_tokens"] += len(ids)
        counts[f"{split}_documents"] += documents
        bar.update(size)

    # spawn, not fork: the caller may hold threads (torch, tqdm), and forking them can deadlock.
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        in_flight = deque()
        for is_val, batch, size in batches(pieces(files, config), config.chunk_bytes):
            # Pool.imap would read the whole corpus ahead of slow workers; a window of tasks bounds the memory.
            if len(in_flight) >= 2 * workers:
                write(*in_flight.popleft())
            in_flight.append((is_val, pool.apply_async(encode_pieces, (batch,)), sum(e for _, e in batch), size))
        while in_flight:
            write(*in_flight.popleft())
    return counts


def prepare_corpus(config: CorpusConfig, out_dir: str | os.PathLike) -> dict:
    """Tokenize the corpus config.input into out_dir; returns the description written to tokenizer.json."""
    out = Path(out_dir)
    existing = [name for name in DATASET_FILES if (out / name).exists()]
    if existing and not config.overwrite:
        raise UserError(f"{out} already holds a dataset ({', '.join(existing)}); pass --overwrite=True to replace "
                         "it, or choose another --out_dir")
    files = corpus_files(config.input)
    tokenizer = GPT2Tokenizer()  # offline without the BPE files: fails here, before any work
    # Everything is written in full before anything replaces the old dataset: a failure leaves that one whole.
    with replace_files(out, DATASET_FILES) as (train_temp, val_temp, description_temp):
        with train_temp.open("wb") as train, val_temp.open("wb") as val, \
                tqdm(total=sum(f.stat().st_size for f in files), unit="B", unit_scale=True, unit_divisor=1024,
                     disable=not config.progress, desc="tokenizing") as bar:
            counts = tokenize_corpus(files, config, {False: train, True: val}, bar)
        documents = counts["train_documents"] + counts["val_documents"]
        if not (counts["train_documents"] and counts["val_documents"]):
            raise UserError(f"{documents} documents gave {counts['val_documents']} for validation and "
                             f"{counts['train_documents']} for training (val_fraction={config.val_fraction}); each "
                             "split needs one: change --val_fraction or add documents")
        description = {**tokenizer.description(), "dtype": "uint16", **counts, "source": config.input}
        description_temp.write_text(json.dumps(description, indent=1), encoding="utf-8")
    return description
