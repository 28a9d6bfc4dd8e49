"""Corpora larger than memory: folders of text and JSON-lines files -> train.bin, val.bin, test.bin, tokenizer.json
in GPT-2 BPE tokens, a BPE learned from the training documents (--tokenizer=bpe), or characters (--tokenizer=char).

A .txt file is one document; each line of a .jsonl file is one, its text under `text_field` (the way web-scale
corpora are distributed). Every document is followed by <|endoftext|> and goes whole to train, val or test, by
one seeded draw per document (CORPUS_RULE). Memory stays bounded whatever the corpus size: files are read in
pieces of about chunk_bytes, a few pieces per worker process are in flight, a BPE learns from at most
tokenizer_sample_bytes of the first training documents, and tokens go straight to temporary files that are
renamed over the dataset only when everything succeeded.
"""

import glob
import hashlib
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
from files import replace_files, special_file_kind
from text.bpe_train import TokenizerConfig, learn_bpe
from text.cuts import stream_pieces
from text.dataset import SPLITS, check_overwrite, check_test_fraction, split_record, token_dtype
from text.tokenizer import (
    DATASET_FILES,
    CharTokenizer,
    GPT2Tokenizer,
    Tokenizer,
    from_description,
    recorded_description,
)

SUFFIXES = (".txt", ".jsonl")
CORPUS_RULE = ("one draw u of random.Random(seed) per document, in sorted file order: val if u < val_fraction, "
               "test if u < val_fraction + test_fraction, else train")
WORKERS_PER_CORE = 4  # more processes than this only add memory: each holds its own tokenizer and pieces
MAX_CHUNK_BYTES = 1 << 28  # a piece is held by the reader and by a worker, a few per worker at once


def usable_cpus() -> int:
    """The CPUs this process may run on (a scheduler's allocation, not the whole machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class CorpusConfig:
    input: str = ""  # a folder (its .txt and .jsonl files, recursively), a glob such as 'web/*.jsonl', or one file
    out_dir: str = ""  # where train.bin, val.bin, test.bin and tokenizer.json go; empty: data/corpus
    text_field: str = "text"  # the field of each JSON line that holds the document's text
    val_fraction: float = 0.001  # share of the documents, drawn at random (seeded), held out for validation
    test_fraction: float = 0.001  # share of the documents, drawn the same way, held out for the final test
    seed: int = 1337  # seeds the draw of the validation and test documents
    workers: int = 0  # tokenizer processes; 0: one per CPU core
    chunk_bytes: int = 1 << 20  # text sent to a worker at a time; a long .txt file is cut where tokens end
    overwrite: bool = False  # replace a dataset already prepared in out_dir
    progress: bool = True  # show a tqdm bar of the bytes read

    def __post_init__(self) -> None:
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction={self.val_fraction} must be in (0, 1)")
        check_test_fraction(self.test_fraction, self.val_fraction)
        if self.workers < 0:
            raise ValueError(f"workers={self.workers} must be >= 0 (0: one per CPU core)")
        if self.workers > WORKERS_PER_CORE * usable_cpus():
            raise ValueError(f"workers={self.workers} is more than {WORKERS_PER_CORE * usable_cpus()} "
                             f"({WORKERS_PER_CORE} per CPU core, {usable_cpus()} here): each is a process with its own "
                             f"memory; use --workers={usable_cpus()} or fewer (0: one per core)")
        if not 1 <= self.chunk_bytes <= MAX_CHUNK_BYTES:
            raise ValueError(f"chunk_bytes={self.chunk_bytes} must be at least 1 and at most {MAX_CHUNK_BYTES:,} "
                             "(a few pieces per worker are in memory at once)")
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
    elif kind := special_file_kind(path):
        raise UserError(f"input {input!r} is {kind}, not a regular file; give a .txt or .jsonl file, a folder of "
                        "them or a glob")
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


def text_pieces(path: Path, chunk_bytes: int) -> Iterator[tuple[str, int]]:
    """A text file as (text, bytes) pieces of about chunk_bytes each, cut only where tokens end anyway."""
    with path.open("rb") as file:
        yield from stream_pieces(file, chunk_bytes, str(path))


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
                raise UserError(f"{path}:{number}: no text field {text_field!r} ("
                                f"{what_the_line_has(record, text_field)}); name the field that holds the text "
                                "with --text_field=NAME")
            yield text, len(line)


def what_the_line_has(record: object, text_field: str) -> str:
    """Why a JSON line gave no text: not an object, the field missing, or the field not a string."""
    if not isinstance(record, dict):
        return f"the line is a JSON {type(record).__name__}, not an object"
    if text_field in record:
        value = record[text_field]
        return f"its {text_field!r} is a {type(value).__name__}, {str(value)[:40]!r}, not a string"
    return f"the line has {sorted(record)}"


def draw_split(draw: random.Random, config: CorpusConfig) -> str:
    """One document's split by CORPUS_RULE (with the same seed, val is the same as before test splits existed)."""
    u = draw.random()
    return "val" if u < config.val_fraction else "test" if u < config.val_fraction + config.test_fraction else "train"


def pieces(files: list[Path], config: CorpusConfig) -> Iterator[tuple[str, str, bool, int]]:
    """(split, text, ends_document, bytes read) over the corpus. Empty documents are skipped (bytes only)."""
    draw = random.Random(config.seed)
    for path in files:
        try:
            if path.suffix == ".jsonl":
                for text, size in jsonl_documents(path, config.text_field):
                    yield (draw_split(draw, config) if text else "train"), text, bool(text), size
            elif path.stat().st_size:
                split = draw_split(draw, config)
                for text, size in text_pieces(path, config.chunk_bytes):
                    yield split, text, False, size
                yield split, "", True, 0
        except OSError as e:  # unreadable, or gone since it was listed
            raise UserError(f"input file {str(path)!r} cannot be read: {e.strerror or e}") from None


def batches(stream: Iterator[tuple[str, str, bool, int]], chunk_bytes: int) -> Iterator[tuple[str, list, int]]:
    """Consecutive pieces of one split, about chunk_bytes of text together: (split, [(text, ends)], bytes)."""
    batch, batch_split, length, size = [], "train", 0, 0
    for split, text, ends, piece_size in stream:
        size += piece_size
        if not text and not ends:
            continue
        if batch and (split != batch_split or length >= chunk_bytes):
            yield batch_split, batch, size - piece_size
            batch, length, size = [], 0, piece_size
        batch_split = split
        batch.append((text, ends))
        length += len(text)
    if batch or size:
        yield batch_split, batch, size


WORKER_TOKENIZER: list[Tokenizer] = []  # in each worker process: the tokenizer, built once by start_worker


def start_worker(description: dict) -> None:
    WORKER_TOKENIZER.append(from_description(description))


def encode_pieces(batch: list[tuple[str, bool]], dtype: str) -> np.ndarray:
    """Runs in a worker: the ids of each text (special-token strings are plain text), end-of-text after each
    document's last piece, as dtype (uint16 for up to 65,536 ids: it halves what travels back)."""
    tokenizer = WORKER_TOKENIZER[0]
    ids = [np.zeros(0, dtype=np.int64)]
    for text, ends in batch:
        ids.append(tokenizer.encode_documents(text))
        if ends:
            ids.append(np.array([tokenizer.eot_token]))
    return np.concatenate(ids).astype(dtype)


def worker_count(requested: int) -> int:
    return requested or usable_cpus()


def tokenize_corpus(files: list[Path], config: CorpusConfig, tokenizer: Tokenizer, outputs: dict[str, object],
                    bar) -> tuple[dict, dict]:
    """Tokenize in worker processes, writing each batch's ids to outputs[split] in corpus order; returns the
    counts of tokens and documents per split, and the SHA-256 of each split's bytes."""
    counts = {f"{split}_{what}": 0 for what in ("tokens", "documents") for split in SPLITS}
    hashes = {split: hashlib.sha256() for split in SPLITS}
    workers, dtype = worker_count(config.workers), token_dtype(tokenizer.vocab_size).name

    def write(split: str, result, documents: int, size: int) -> None:
        ids = result.get()
        data = ids.tobytes()
        outputs[split].write(data)  # not ids.tofile: its full-disk error has no errno, only a count
        hashes[split].update(data)
        counts[f"{split}_tokens"] += len(ids)
        counts[f"{split}_documents"] += documents
        bar.update(size)

    # spawn, not fork: the caller may hold threads (torch, tqdm, HF tokenizers), and forking them can deadlock.
    with multiprocessing.get_context("spawn").Pool(workers, start_worker, (tokenizer.description(),)) as pool:
        in_flight = deque()
        for split, batch, size in batches(pieces(files, config), config.chunk_bytes):
            # Pool.imap would read the whole corpus ahead of slow workers; a window of tasks bounds the memory.
            if len(in_flight) >= 2 * workers:
                write(*in_flight.popleft())
            in_flight.append((split, pool.apply_async(encode_pieces, (batch, dtype)), sum(e for _, e in batch),
                              size))
        while in_flight:
            write(*in_flight.popleft())
    return counts, {split: hashes[split].hexdigest() for split in SPLITS}


def corpus_tokenizer(files: list[Path], config: CorpusConfig, tokenizer: TokenizerConfig) -> Tokenizer:
    """GPT-2's, a BPE learned from the first tokenizer_sample_bytes of the training documents, or the corpus's
    characters."""
    if tokenizer.tokenizer in ("", "gpt2"):
        return GPT2Tokenizer()  # offline without the BPE files: fails here, before any work
    if tokenizer.tokenizer == "char":
        return corpus_characters(files, config)
    texts = (text for split, text, _, _ in pieces(files, config) if split == "train" and text)
    return learn_bpe(texts, tokenizer.vocab_size, tokenizer.tokenizer_sample_bytes,
                     sum(f.stat().st_size for f in files), config.progress)


def corpus_characters(files: list[Path], config: CorpusConfig) -> CharTokenizer:
    """A char tokenizer of every character in the corpus (all splits, as the single-text char preparer does, so
    that val and test hold no unknown character), with <|endoftext|> after them. It reads the whole corpus once
    more: a character vocabulary cannot be sampled."""
    chars = set()
    with tqdm(total=sum(f.stat().st_size for f in files), unit="B", unit_scale=True, unit_divisor=1024,
              disable=not config.progress, desc="finding characters") as bar:
        for _, text, _, size in pieces(files, config):
            chars.update(text)
            bar.update(size)
    if not chars:
        raise UserError(f"input {config.input!r} holds no text: every document is empty")
    return CharTokenizer("".join(sorted(chars)), end_of_text=True)


def prepare_corpus(config: CorpusConfig, out_dir: str | os.PathLike, tokenizer: TokenizerConfig | None = None) -> dict:
    """Tokenize the corpus config.input into out_dir; returns the description written to tokenizer.json."""
    out = Path(out_dir)
    check_overwrite(out, config.overwrite)
    files = corpus_files(config.input)
    learned = corpus_tokenizer(files, config, tokenizer or TokenizerConfig())
    # Everything is written in full before anything replaces the old dataset: a failure leaves that one whole.
    with replace_files(out, DATASET_FILES) as (train_temp, val_temp, test_temp, description_temp):
        with train_temp.open("wb") as train, val_temp.open("wb") as val, test_temp.open("wb") as test, \
                tqdm(total=sum(f.stat().st_size for f in files), unit="B", unit_scale=True, unit_divisor=1024,
                     disable=not config.progress, desc="tokenizing") as bar:
            counts, digests = tokenize_corpus(files, config, learned, {"train": train, "val": val, "test": test},
                                              bar)
        documents = sum(counts[f"{split}_documents"] for split in SPLITS)
        if not (counts["train_documents"] and counts["val_documents"]):
            raise UserError(f"{documents} documents gave {counts['val_documents']} for validation and "
                            f"{counts['train_documents']} for training (val_fraction={config.val_fraction}), "
                            f"{counts['test_documents']} for test; train and val need one each: change "
                            "--val_fraction or add documents")
        split = split_record(CORPUS_RULE, {"val_fraction": config.val_fraction,
                                           "test_fraction": config.test_fraction, "seed": config.seed},
                             {name: counts[f"{name}_tokens"] for name in SPLITS}, digests)
        description = {**recorded_description(learned), "dtype": token_dtype(learned.vocab_size).name, **counts,
                       "source": config.input, "split": split}
        description_temp.write_text(json.dumps(description, indent=1), encoding="utf-8")
    return description
