"""nanoGPT's data folders as they are (train.bin, val.bin and, for characters, meta.pkl), described in this repo's
terms: what tokenizer.py and dataset.py read them with, torch-free. Nothing here writes to them.
"""

import pickle
from pathlib import Path

from errors import UserError

GPT2_VOCAB_SIZE = 50257  # tiktoken's GPT-2 encoding; nanoGPT's models pad it to 50304 rows, as ours do


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers only: every other object (and so every call a pickle
    can make) needs find_class, which refuses."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it asks for {module}.{name}")


def read_meta(path: Path) -> dict:
    """nanoGPT's meta.pkl, loaded without running anything it holds."""
    try:
        with path.open("rb") as file:
            meta = _PlainUnpickler(file).load()
    except Exception as e:  # a damaged pickle fails in many ways (EOF, bad opcode, refused object, overflow)
        raise UserError(f"{path} holds more than plain dicts, lists, strings and numbers, or is damaged "
                        f"({type(e).__name__}: {e}); refusing it. nanoGPT's prepare.py writes it again") from None
    if not isinstance(meta, dict):
        raise UserError(f"{path} is not nanoGPT's meta.pkl: it holds a {type(meta).__name__}, not a dict")
    return meta


def char_tokenizer(meta: dict, path: Path) -> dict:
    """Our description of meta.pkl's character vocabulary: id i is the character itos[i]."""
    itos, vocab_size = meta.get("itos"), meta.get("vocab_size")
    if not (isinstance(itos, dict) and type(vocab_size) is int and sorted(itos) == list(range(vocab_size))
            and all(isinstance(c, str) and len(c) == 1 for c in itos.values())
            and len(set(itos.values())) == vocab_size):
        raise UserError(f"{path}: itos is not a character vocabulary (ids 0..vocab_size-1, each a distinct "
                        "character): only nanoGPT's shakespeare_char-style meta.pkl can be read")
    return {"kind": "char", "chars": "".join(itos[i] for i in range(vocab_size)), "vocab_size": vocab_size}


def is_data_folder(path: Path) -> bool:
    """A nanoGPT data folder: train.bin and val.bin without our tokenizer.json, and without the test.bin that
    nanoGPT never writes (one of ours that lost its tokenizer.json is not read as GPT-2's BPE)."""
    path = Path(path)
    return (path / "train.bin").is_file() and (path / "val.bin").is_file() and not is_ours(path)


def is_ours(path: Path) -> bool:
    """Our preparers' folder: a tokenizer.json, or the test.bin nanoGPT never writes."""
    return (path / "tokenizer.json").exists() or (path / "test.bin").exists()


def check_data_folder(path: Path) -> None:
    """Refuse a nanoGPT data folder (not ours, but its meta.pkl or a .bin file) whose train.bin or val.bin is
    missing or not a whole number of the uint16 tokens its prepare.py writes, naming the file: the checks after
    this one speak of tokenizer.json, which nanoGPT never writes."""
    bins = [path / f"{split}.bin" for split in ("train", "val")]
    if is_ours(path) or not ((path / "meta.pkl").is_file() or any(file.exists() for file in bins)):
        return
    for file in bins:
        if not file.is_file():
            raise UserError(f"{file} is missing: nanoGPT's prepare.py writes train.bin and val.bin; run it again")
        size = file.stat().st_size
        if size % 2:  # uint16: 2 bytes a token
            raise UserError(f"{file} has {size:,} bytes, not a whole number of uint16 tokens: the file is cut "
                            "short or not nanoGPT's; prepare it again with nanoGPT's prepare.py")


def data_description(path: Path) -> dict:
    """Our tokenizer.json's content for a nanoGPT data folder: meta.pkl's characters, else GPT-2's BPE; its
    prepare.py writes uint16 tokens."""
    path = Path(path)
    meta = path / "meta.pkl"
    tokens = char_tokenizer(read_meta(meta), meta) if meta.is_file() else {"kind": "gpt2",
                                                                           "vocab_size": GPT2_VOCAB_SIZE}
    counts = {f"{split}_tokens": (path / f"{split}.bin").stat().st_size // 2 for split in ("train", "val")}
    return {**tokens, "dtype": "uint16", **counts, "source": f"nanoGPT data folder {path}"}
