"""Character-level and GPT-2 BPE tokenizers, described by a small JSON file (tokenizer.json) beside the data."""

import json
import os
from pathlib import Path

import numpy as np

TOKENIZER_FILE = "tokenizer.json"


class CharTokenizer:
    """One token per distinct character of the training text, ids in sorted character order."""

    def __init__(self, chars: str):
        self.chars = chars
        self.vocab_size = len(chars)
        self.index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls("".join(sorted(set(text))))

    def encode(self, text: str) -> list[int]:
        missing = sorted(set(text) - self.index.keys())
        if missing:
            raise ValueError(f"characters not in the {self.vocab_size}-character vocabulary: "
                             f"{''.join(missing)!r}; the model only knows {self.chars!r}")
        return [self.index[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def start_token(self) -> int:
        """What an empty prompt starts from: a newline if the text had one, else the first character."""
        return self.index.get("\n", 0)

    def description(self) -> dict:
        return {"kind": "char", "chars": self.chars, "vocab_size": self.vocab_size}


class GPT2Tokenizer:
    """GPT-2's byte-pair encoding through tiktoken."""

    vocab_size = 50257

    def __init__(self):
        self.encoding = gpt2_encoding()
        self.eot_token = self.encoding.eot_token

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode(text, allowed_special={"<|endoftext|>"})

    def encode_documents(self, text: str) -> np.ndarray:
        """A whole corpus as ids; special-token strings in it are plain text, as in nanoGPT's prepare.py."""
        return np.array(self.encoding.encode_ordinary(text), dtype=np.int64)

    def decode(self, ids: list[int]) -> str:
        return self.encoding.decode(ids)

    def start_token(self) -> int:
        return self.eot_token

    def description(self) -> dict:
        return {"kind": "gpt2", "vocab_size": self.vocab_size}


Tokenizer = CharTokenizer | GPT2Tokenizer


def gpt2_encoding():
    """tiktoken's GPT-2 encoding; it downloads two files once, or reads them from TIKTOKEN_CACHE_DIR."""
    import tiktoken

    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:
        raise ConnectionError(
            f"could not load the GPT-2 BPE files ({type(e).__name__}: {e}). tiktoken downloads them on first use; "
            "offline, set TIKTOKEN_CACHE_DIR to a folder that holds them (e.g. copied from a machine with network)"
        ) from e


def from_description(description: dict) -> Tokenizer:
    kind = description.get("kind")
    if kind == "char":
        return CharTokenizer(description["chars"])
    if kind == "gpt2":
        return GPT2Tokenizer()
    raise ValueError(f"unknown tokenizer kind {kind!r} (expected 'char' or 'gpt2')")


def read_description(data_dir: str | os.PathLike) -> dict:
    """The tokenizer.json of a prepared data folder: tokenizer kind, vocab_size, token dtype, split sizes."""
    path = Path(data_dir) / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run the dataset's prepare.py first")
    return json.loads(path.read_text(encoding="utf-8"))


def load_tokenizer(data_dir: str | os.PathLike) -> Tokenizer:
    return from_description(read_description(data_dir))
