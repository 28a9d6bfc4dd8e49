"""Character-level, GPT-2 BPE and learned byte-level BPE tokenizers, described by a JSON file (tokenizer.json)
beside the data. The description is plain data: a learned BPE's tokens are in it as hex strings, so a checkpoint
that stores the description (checkpoint.py) can be sampled from without the data folder and without pickle."""

import contextlib
import hashlib
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from errors import OfflineError, UserError
from text.nanogpt_data import data_description, is_data_folder

DATA_ROOT = Path(__file__).resolve().parents[1] / "data"  # the preparers' folders, data/<name>/prepare.py
TOKENIZER_FILE = "tokenizer.json"
# The files of a prepared dataset, in the order they are replaced: tokenizer.json last, as it says what the .bin hold.
DATASET_FILES = ("train.bin", "val.bin", "test.bin", TOKENIZER_FILE)
KINDS = ("char", "gpt2", "bpe")
END_OF_TEXT = "<|endoftext|>"
# GPT-2's pre-tokenization (the form tiktoken's gpt2 encoding uses): contractions, letters, digits, other symbols,
# whitespace; an optional space joins the word after it. Tokens never cross these pieces.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


class CharTokenizer:
    """One token per distinct character of the training text, ids in sorted character order; with end_of_text
    (the corpus preparer's documents), <|endoftext|> is one more id after the characters."""

    def __init__(self, chars: str, end_of_text: bool = False):
        self.chars = chars
        self.eot_token = len(chars) if end_of_text else None
        self.vocab_size = len(chars) + end_of_text
        self.index = {c: i for i, c in enumerate(chars)}
        points = np.frombuffer(chars.encode("utf-32-le"), dtype=np.uint32)
        self.order = np.argsort(points).astype(np.int64)  # ids by code point: a vectorized lookup
        self.sorted_points = points[self.order]

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls("".join(sorted(set(text))))

    def encode(self, text: str) -> list[int]:
        return self.encode_documents(text).tolist()

    def encode_documents(self, text: str) -> np.ndarray:
        """text as ids, looked up for all characters at once (NumPy) rather than one at a time."""
        if missing := dropped_characters(text, self):
            raise UserError(f"characters not in the {self.vocab_size}-character vocabulary: "
                             f"{missing!r}; the model only knows {self.chars!r}")
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        return self.order[np.searchsorted(self.sorted_points, points)]

    def decode(self, ids: list[int]) -> str:
        return "".join(END_OF_TEXT if i == self.eot_token else self.chars[i] for i in ids)

    def start_token(self) -> int:
        """What an empty prompt starts from: a newline if the text had one, else the first character."""
        return self.index.get("\n", 0)

    def description(self) -> dict:
        special = {} if self.eot_token is None else {"special_tokens": {END_OF_TEXT: self.eot_token}}
        return {"kind": "char", "chars": self.chars, "vocab_size": self.vocab_size, **special}


def dropped_characters(text: str, tokenizer: "Tokenizer") -> str:
    """The distinct characters of text that the tokenizer has no token for, sorted: a char vocabulary's missing
    ones; "" for GPT-2 and the BPEs, whose byte tokens encode any text."""
    if not isinstance(tokenizer, CharTokenizer):
        return ""
    return "".join(sorted(set(text) - tokenizer.index.keys()))


class TiktokenTokenizer:
    """Byte-level BPE through a tiktoken Encoding (GPT-2's, or one learned from the data): any text round-trips."""

    encoding = None  # a tiktoken.Encoding, set by the subclass
    eot_token = 0  # the id of <|endoftext|>

    def encode(self, text: str) -> list[int]:
        with bounded_backtracking(self):
            return self.encoding.encode(text, allowed_special={END_OF_TEXT})

    def encode_documents(self, text: str) -> np.ndarray:
        """A whole corpus as ids; special-token strings in it are plain text, as in nanoGPT's prepare.py."""
        with bounded_backtracking(self):
            return np.array(self.encoding.encode_ordinary(text), dtype=np.int64)

    def decode(self, ids: list[int]) -> str:
        return self.encoding.decode(ids)

    def start_token(self) -> int:
        return self.eot_token


@contextlib.contextmanager
def bounded_backtracking(tokenizer: TiktokenTokenizer) -> Iterator[None]:
    """tiktoken's regex engine gives up on a pre-tokenization pattern that backtracks without bound (one edited by
    hand: "(a+)+(?!c)b" on "aaa...a!"): encode raises a ValueError, encode_ordinary panics in Rust (a pyo3
    PanicException, a BaseException, after Rust's own message on stderr). Either is one line here; any other error
    is ours, and stays loud."""
    try:
        yield
    except BaseException as e:
        panicked = type(e).__name__ == "PanicException" and "BacktrackLimitExceeded" in str(e)
        if not (panicked or isinstance(e, ValueError) and "backtracking" in str(e)):
            raise
        pattern = getattr(tokenizer, "pattern", "")
        raise UserError(f"the tokenizer's pre-tokenization pattern {pattern!r} backtracks without bound on this text "
                        "(tiktoken gave up: BacktrackLimitExceeded); the pattern was edited: restore GPT-2's "
                        "(text/tokenizer.py's GPT2_PATTERN) in tokenizer.json, or prepare the data again") from None


class GPT2Tokenizer(TiktokenTokenizer):
    """GPT-2's byte-pair encoding through tiktoken."""

    vocab_size = 50257

    def __init__(self):
        self.encoding = gpt2_encoding()
        self.eot_token = self.encoding.eot_token

    def description(self) -> dict:
        return {"kind": "gpt2", "vocab_size": self.vocab_size}


class BPETokenizer(TiktokenTokenizer):
    """A byte-level BPE learned from a dataset's training split (bpe_train.py): ids 0-255 are the bytes, then the
    merged tokens in the order they were learned (a token's id is its merge rank), then <|endoftext|> last.
    Encoding is tiktoken's, given these ranks: as fast as GPT-2's."""

    def __init__(self, tokens: list[bytes], pattern: str = GPT2_PATTERN):
        import tiktoken

        self.tokens, self.pattern = tokens, pattern
        self.vocab_size = len(tokens) + 1
        self.eot_token = len(tokens)
        self.encoding = tiktoken.Encoding(f"bpe{self.vocab_size}", pat_str=pattern,
                                          mergeable_ranks={token: rank for rank, token in enumerate(tokens)},
                                          special_tokens={END_OF_TEXT: self.eot_token},
                                          explicit_n_vocab=self.vocab_size)

    def description(self) -> dict:
        return {"kind": "bpe", "vocab_size": self.vocab_size, "pattern": self.pattern,
                "special_tokens": {END_OF_TEXT: self.eot_token}, "tokens": [token.hex() for token in self.tokens]}


Tokenizer = CharTokenizer | GPT2Tokenizer | BPETokenizer


def token_bytes(tokenizer: Tokenizer) -> list[bytes]:
    """The UTF-8 bytes each id stands for, by id; a special token (<|endoftext|>) stands for none of the text."""
    if isinstance(tokenizer, CharTokenizer):
        return [c.encode("utf-8") for c in tokenizer.chars] + [b""] * (tokenizer.eot_token is not None)
    return [b"" if i == tokenizer.eot_token else tokenizer.encoding.decode_single_token_bytes(i)
            for i in range(tokenizer.vocab_size)]


def token_byte_counts(tokenizer: Tokenizer) -> np.ndarray:
    """Bytes of UTF-8 text per id (int64, by id): summed over a token stream, the bytes of its text, the
    denominator of bits per byte. <|endoftext|> counts 0."""
    return np.array([len(b) for b in token_bytes(tokenizer)], dtype=np.int64)


def bits_per_unit(nats_per_token: float, tokens: int, units: int) -> float:
    """A mean loss in nats per token as bits per byte or per character: the same total information (nats per token
    x tokens, in bits) spread over the units of text the tokens stand for."""
    return nats_per_token * tokens / units / math.log(2)


def token_char_counts(tokenizer: Tokenizer) -> np.ndarray:
    """Characters per id (int64, by id), counted as the UTF-8 lead bytes (all but 0b10xxxxxx) in the token: a
    byte-level token may hold part of a character, but summed over a stream of whole text this is exactly the
    number of characters (every character has one lead byte). 1 for every char-tokenizer id."""
    return np.array([sum(1 for byte in b if byte & 0xC0 != 0x80) for b in token_bytes(tokenizer)], dtype=np.int64)


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
    """The one tokenizer loader: from tokenizer.json's description, or the copy a checkpoint holds."""
    kind = description.get("kind")
    if kind == "char":
        return CharTokenizer(description["chars"], END_OF_TEXT in description.get("special_tokens", {}))
    if kind == "gpt2":
        return GPT2Tokenizer()
    if kind == "bpe":
        return BPETokenizer([bytes.fromhex(token) for token in description["tokens"]], description["pattern"])
    raise UserError(f"unknown tokenizer kind {kind!r} (expected 'char', 'gpt2' or 'bpe')")


def pattern_error(pattern: str) -> str | None:
    """Why tiktoken's regex engine refuses pattern, or None: tried on the 256 bytes alone (a millisecond), so
    that a damaged pattern is found where the description is read, not where a run has begun."""
    import tiktoken

    try:
        tiktoken.Encoding("check", pat_str=pattern, mergeable_ranks={bytes([i]): i for i in range(256)},
                          special_tokens={})
    except ValueError as e:
        return str(e)
    return None


def check_bpe_description(description: dict, source: str) -> None:
    tokens, vocab_size = description.get("tokens"), description.get("vocab_size")
    problem = None
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens) or vocab_size != len(tokens) + 1:
        problem = "'tokens' (hex strings) and vocab_size one more than their number (<|endoftext|>)"
    elif not isinstance(description.get("pattern"), str):
        problem = "a pre-tokenization 'pattern'"
    elif error := pattern_error(description["pattern"]):
        problem = f"a 'pattern' that is a regular expression ({error})"
    elif description.get("special_tokens") != {END_OF_TEXT: len(tokens)}:
        problem = f"special_tokens {{{END_OF_TEXT!r}: {len(tokens)}}}, the last id"
    else:
        try:
            decoded = [bytes.fromhex(t) for t in tokens]
        except ValueError:
            decoded = []
        if decoded[:256] != [bytes([i]) for i in range(256)] or len(set(decoded)) != len(decoded):
            problem = "the 256 bytes as ids 0-255, then distinct merged tokens"
    if problem:
        raise UserError(f"{source}: a bpe tokenizer needs {problem}")


def check_description(description: object, source: str) -> dict:
    """description, if it is a tokenizer description that the code can use; else a UserError naming source."""
    if not isinstance(description, dict):
        raise UserError(f"{source}: the tokenizer description is not a JSON object")
    kind, vocab_size = description.get("kind"), description.get("vocab_size")
    if kind == "char":
        chars, special = description.get("chars"), description.get("special_tokens", {})
        if (not isinstance(chars, str) or not chars or len(set(chars)) != len(chars)
                or special not in ({}, {END_OF_TEXT: len(chars)}) or vocab_size != len(chars) + len(special)):
            raise UserError(f"{source}: a char tokenizer needs 'chars', distinct characters, and vocab_size equal "
                            f"to their number (one more with special_tokens {{{END_OF_TEXT!r}: the next id}})")
    elif kind == "gpt2":
        if vocab_size != GPT2Tokenizer.vocab_size:
            raise UserError(f"{source}: a gpt2 tokenizer has vocab_size {GPT2Tokenizer.vocab_size}, not "
                            f"{vocab_size!r}")
    elif kind == "bpe":
        check_bpe_description(description, source)
    else:
        raise UserError(f"{source}: unknown tokenizer kind {kind!r} (expected 'char', 'gpt2' or 'bpe')")
    return description


def tokenizer_difference(old: dict, new: dict) -> str | None:
    """How two descriptions tokenize differently (None if the same ids mean the same text in both)."""
    if old["kind"] != new["kind"] or old["vocab_size"] != new["vocab_size"]:
        return f"a {old['kind']} vocabulary of {old['vocab_size']} against a {new['kind']} one of {new['vocab_size']}"
    if old["kind"] == "char" and old.get("special_tokens") != new.get("special_tokens"):
        return f"the same size ({old['vocab_size']}) but {END_OF_TEXT} in one of them only"
    if old["kind"] == "char" and old["chars"] != new["chars"]:
        changed = [i for i, (a, b) in enumerate(zip(old["chars"], new["chars"], strict=True)) if a != b]
        first = changed[0]
        return (f"the same size ({old['vocab_size']}) but other characters: {len(changed)} ids differ, the first is "
                f"id {first}, {old['chars'][first]!r} before and {new['chars'][first]!r} now")
    if old["kind"] == "bpe" and (old["tokens"], old["pattern"]) != (new["tokens"], new["pattern"]):
        if old["pattern"] != new["pattern"]:
            return f"the same size ({old['vocab_size']}) but another pre-tokenization pattern"
        first = next(i for i, (a, b) in enumerate(zip(old["tokens"], new["tokens"], strict=True)) if a != b)
        return (f"the same size ({old['vocab_size']}) but other merges: the first that differs is id {first}, "
                f"{bytes.fromhex(old['tokens'][first])!r} before and {bytes.fromhex(new['tokens'][first])!r} now")
    return None


def recorded_description(tokenizer: "Tokenizer") -> dict:
    """tokenizer's description as tokenizer.json records it with the .bin files it encoded: with the SHA-256 of
    what its ids mean (vocabulary_sha256), so that a tokenizer.json edited afterwards is found (check_vocabulary)."""
    description = tokenizer.description()
    return {**description, "vocabulary_sha256": vocabulary_sha256(description)}


def vocabulary_sha256(description: dict) -> str:
    """A SHA-256 of what a description says each id means: its kind, size, characters or tokens and pattern."""
    meaning = {key: description[key] for key in ("kind", "vocab_size", "chars", "tokens", "pattern", "special_tokens")
               if key in description}
    return hashlib.sha256(json.dumps(meaning, sort_keys=True).encode("utf-8")).hexdigest()


def check_vocabulary(data_dir: str | os.PathLike, description: dict) -> None:
    """Refuse a tokenizer.json whose ids mean other text than when its .bin files were written (characters swapped
    by hand, another dataset's vocabulary of the same size): a run would train on ids it decodes as other text. A
    dataset prepared before the digest was recorded has nothing to check."""
    recorded = description.get("vocabulary_sha256")
    if recorded is not None and recorded != vocabulary_sha256(description):
        raise UserError(f"{Path(data_dir) / TOKENIZER_FILE} does not say what its .bin files' ids meant when they were "
                        "written (its vocabulary's SHA-256 is not the one recorded there): its characters or tokens "
                        f"were edited; restore it, or run {preparer_command(data_dir, overwrite=True)}")


# How the configs and docs name a dataset made by --out_dir: data/<text>_bpe<N>, data/<text>_gpt2, from the text of
# data/<text>_char (config/ablate_positions_bpe.py's shakespeare_bpe1024, ablate_tokenizers_python_docs.py's
# python_docs_gpt2).
OUT_DIR_NAME = re.compile(r"(?P<text>.+)_(?:bpe(?P<vocab_size>\d+)|(?P<kind>gpt2|char))")


def preparer_command(data_dir: str | os.PathLike, overwrite: bool = False) -> str:
    """The command that makes the dataset folder data_dir (again, with overwrite): data/<name>/prepare.py in a
    preparer's own folder; in a folder made with --out_dir, the preparer of its text with that --out_dir (exactly,
    for those names, shakespeare_bpe1024 or python_docs_gpt2; else an example), never a data/<name>/prepare.py
    that does not exist."""
    folder, again = Path(data_dir), " --overwrite=True" if overwrite else ""
    under_data = folder.resolve().parent == DATA_ROOT
    if under_data and (DATA_ROOT / folder.name / "prepare.py").is_file():
        return f"python data/{folder.name}/prepare.py{again}"
    out = f"data/{folder.name}" if under_data else str(folder)
    named = OUT_DIR_NAME.fullmatch(folder.name) if under_data else None
    if named and (DATA_ROOT / f"{named['text']}_char" / "prepare.py").is_file():
        tokenizer = (f" --tokenizer=bpe --vocab_size={named['vocab_size']}" if named["vocab_size"]
                     else f" --tokenizer={named['kind']}")
        return f"python data/{named['text']}_char/prepare.py{tokenizer} --out_dir={out}{again}"
    return (f"the preparer of its text with --out_dir={out}{again}, e.g. python data/shakespeare_char/prepare.py "
            f"--input=TEXT --out_dir={out}{again}")


def read_description(data_dir: str | os.PathLike) -> dict:
    """The tokenizer.json of a prepared data folder: tokenizer kind, vocab_size, token dtype, split sizes."""
    path = Path(data_dir) / TOKENIZER_FILE
    rerun = f"run {preparer_command(data_dir, overwrite=True)}"
    if not path.is_file() and is_data_folder(data_dir):  # read as it is, meta.pkl for characters
        return check_description(data_description(data_dir), f"{data_dir} (a nanoGPT data folder)")
    if not path.is_file():
        raise UserError(f"{path} does not exist: run {preparer_command(data_dir)} first")
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
    for split in ("train", "val", "test"):
        count = description.get(f"{split}_tokens")
        if count is not None and (type(count) is not int or count < 0):
            raise UserError(f"{path}: {split}_tokens={count!r} is not a token count; {rerun}")
    return description


def load_tokenizer(data_dir: str | os.PathLike) -> Tokenizer:
    return from_description(read_description(data_dir))
