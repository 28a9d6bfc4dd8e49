"""Character-level and GPT-2 BPE tokenizers, described by a small JSON file (tokenizer.json) beside the data."""

import json
import os
from pathlib import Path

import numpy as np

from errors import OfflineError, UserError
from nanogpt import data_description, is_data_folder

TOKENIZER_FILE = "tokenizer.json"
# The files of a prepared dataset, in the order they are replaced: tokenizer.json last, as it says what the .bin hold.
DATASET_FILES = ("train.bin", "val.bin", TOKENIZER_FILE)


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
            raise UserError(f"characters not in the {self.vocab_size}-character vocabulary: "
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
        raise OfflineError(
            f"could not load the GPT-2 BPE files ({type(e).__name__}: {e}). tiktoken downloads them on first use; "
            "offline, set TIKTOKEN_CACHE_DIR to a folder that holds them (e.g. copied from a machine with network)"
        ) from e


def from_description(description: dict) -> Tokenizer:
    kind = description.get("kind")
    if kind == "char":
        return CharTokenizer(description["chars"])
    if kind == "gpt2":
        return GPT2Tokenizer()
    raise UserError(f"unknown tokenizer kind {kind!r} (expected 'char' or 'gpt2')")


def check_description(description: object, source: str) -> dict:
    """description, if it is a tokenizer description that the code can use; else a UserError naming source."""
    if not isinstance(description, dict):
        raise UserError(f"{source}: the tokenizer description is not a JSON object")
    kind, vocab_size = description.get("kind"), description.get("vocab_size")
    if kind == "char":
        chars = description.get("chars")
        if not isinstance(chars, str) or not chars or len(set(chars)) != len(chars) or vocab_size != len(chars):
            raise UserError(f"{source}: a char tokenizer needs 'chars', distinct characters, and vocab_size equal "
                            "to their number")
    elif kind == "gpt2":
        if vocab_size != GPT2Tokenizer.vocab_size:
            raise UserError(f"{source}: a gpt2 tokenizer has vocab_size {GPT2Tokenizer.vocab_size}, not "
                            f"{vocab_size!r}")
    else:
        raise UserError(f"{source}: unknown tokenizer kind {kind!r} (expected 'char' or 'gpt2')")
    return description


def tokenizer_difference(old: dict, new: dict) -> str | None:
    """How two descriptions tokenize differently (None if the same ids mean the same text in both)."""
    if old["kind"] != new["kind"] or old["vocab_size"] != new["vocab_size"]:
        return f"a {old['kind']} vocabulary of {old['vocab_size']} against a {new['kind']} one of {new['vocab_size']}"
    if old["kind"] == "char" and old["chars"] != new["chars"]:
        changed = [i for i, (a, b) in enumerate(zip(old["chars"], new["chars"], strict=True)) if a != b]
        first = changed[0]
        return (f"the same size ({old['vocab_size']}) but other characters: {len(changed)} ids differ, the first is "
                f"id {first}, {old['chars'][first]!r} before and {new['chars'][first]!r} now")
    return None


def read_description(data_dir: str | os.PathLike) -> dict:
    """The tokenizer.json of a prepared data folder: tokenizer kind, vocab_size, token dtype, split sizes."""
    path = Path(data_dir) / TOKENIZER_FILE
    rerun = f"run the dataset's prepare.py (python data/{Path(data_dir).name}/prepare.py)"
    if not path.is_file() and is_data_folder(data_dir):  # read as it is, meta.pkl for characters
        return check_description(data_description(data_dir), f"{data_dir} (a nanoGPT data folder)")
    if not path.is_file():
        raise UserError(f"{path} does not exist: {rerun} first")
    try:
        description = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is damaged ({type(e).__name__}: {e}); {rerun}") from None
    try:
        check_description(description, str(path))
    except UserError as e:
        raise UserError(f"{e}; {rerun}") from None
    if description.get("dtype") not in ("uint16", "uint32"):
        raise UserError(f"{path}: token dtype {description.get('dtype')!r} must be uint16 or uint32; {rerun}")
    for split in ("train", "val"):
        count = description.get(f"{split}_tokens")
        if count is not None and (type(count) is not int or count < 0):
            raise UserError(f"{path}: {split}_tokens={count!r} is not a token count; {rerun}")
    return description


def load_tokenizer(data_dir: str | os.PathLike) -> Tokenizer:
    return from_description(read_description(data_dir))
