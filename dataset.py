"""Token streams on disk: text -> tokenizer.json + train.bin + val.bin, and random batches back out of them."""

import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from errors import OfflineError, UserError
from files import atomic_files, replace_files
from nanogpt import is_data_folder
from tokenizer import DATASET_FILES, TOKENIZER_FILE, CharTokenizer, GPT2Tokenizer, read_description

REPO_ROOT = Path(__file__).resolve().parent


@dataclass
class PrepareConfig:
    input: str = ""  # a UTF-8 text file to train on; empty: the dataset's default text
    val_fraction: float = 0.1  # share of the tokens, taken from the end, held out for validation
    dtype: str = "auto"  # token dtype on disk: auto (uint16, uint32 when the vocabulary needs it) | uint16 | uint32

    def __post_init__(self) -> None:
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction={self.val_fraction} must be in (0, 1)")
        if self.dtype not in ("auto", "uint16", "uint32"):
            raise ValueError(f"dtype={self.dtype!r} must be auto, uint16 or uint32")


def read_text(path: str | os.PathLike, what: str = "input file") -> str:
    """The UTF-8 text of a file the user named; anything else (missing, a folder, binary, empty) a UserError."""
    file = Path(path)
    if file.is_dir():
        raise UserError(f"{what} {str(path)!r} is a folder, not a text file")
    if not file.is_file():
        raise UserError(f"{what} {str(path)!r} does not exist")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{what} {str(path)!r} is not UTF-8 text: byte {e.object[e.start]:#x} at offset "
                        f"{e.start} cannot be decoded") from None
    except OSError as e:
        raise UserError(f"{what} {str(path)!r} cannot be read: {e.strerror}") from None
    if not text:
        raise UserError(f"{what} {str(path)!r} is empty")
    return text


def download_text(url: str, destination: Path, timeout: float = 10.0) -> str:
    """Download url to destination once; offline this fails within `timeout` seconds with a clear message."""
    if not destination.exists():
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                data = response.read()
        except OSError as e:
            raise OfflineError(f"could not download {url} ({e}); offline, pass a local text file with "
                               "--input=PATH") from None
        with atomic_files(destination) as (temp,):
            temp.write_bytes(data)
    return read_text(destination)


def token_dtype(vocab_size: int, requested: str = "auto") -> np.dtype:
    needed = np.uint16 if vocab_size <= 2**16 else np.uint32
    if vocab_size > 2**32:
        raise UserError(f"vocab_size={vocab_size} does not fit in uint32")
    if requested == "auto":
        return np.dtype(needed)
    if np.iinfo(requested).max < vocab_size - 1:
        raise UserError(f"vocab_size={vocab_size} does not fit dtype {requested} (largest id "
                         f"{np.iinfo(requested).max}); use --dtype=uint32 or auto")
    return np.dtype(requested)


def prepare(text: str, out_dir: str | os.PathLike, tokenizer_kind: str, config: PrepareConfig | None = None,
            source: str = "") -> dict:
    """Tokenize text and write tokenizer.json, train.bin and val.bin to out_dir. Returns the description."""
    config = config or PrepareConfig()
    if tokenizer_kind == "char":
        tokenizer = CharTokenizer.from_text(text)
        ids = np.array(tokenizer.encode(text), dtype=np.int64)
    elif tokenizer_kind == "gpt2":
        tokenizer = GPT2Tokenizer()
        ids = tokenizer.encode_documents(text)
    else:
        raise UserError(f"tokenizer {tokenizer_kind!r} must be 'char' or 'gpt2'")
    dtype = token_dtype(tokenizer.vocab_size, config.dtype)
    n_val = int(len(ids) * config.val_fraction)
    if n_val < 2 or len(ids) - n_val < 2:
        raise UserError(f"the corpus is too short: {len(ids)} tokens give {len(ids) - n_val} train and {n_val} "
                         f"val tokens (val_fraction={config.val_fraction}); each split needs at least 2")
    description = {**tokenizer.description(), "dtype": dtype.name, "train_tokens": len(ids) - n_val,
                   "val_tokens": n_val, "source": source}
    # All three are written in full before any replaces the old dataset: a failure leaves that one whole.
    with replace_files(Path(out_dir), DATASET_FILES) as (train_temp, val_temp, description_temp):
        ids[:-n_val].astype(dtype).tofile(train_temp)
        ids[-n_val:].astype(dtype).tofile(val_temp)
        description_temp.write_text(json.dumps(description, indent=1), encoding="utf-8")
    return description


def prepare_main(argv: list[str], out_dir: Path, tokenizer_kind: str, default_text, about: str) -> None:
    """The command line of every data/<name>/prepare.py. default_text() gives the text when --input is not set."""
    from errors import main_guard
    from options import parse_options

    def main(argv: list[str]) -> None:
        (config,) = parse_options(argv, (PrepareConfig,), prog=f"data/{out_dir.name}/prepare.py", description=about)
        text = read_text(config.input) if config.input else default_text()
        description = prepare(text, out_dir, tokenizer_kind, config, source=config.input or "default")
        print(f"{out_dir}: vocab {description['vocab_size']}, train {description['train_tokens']:,} tokens, "
              f"val {description['val_tokens']:,} tokens ({description['dtype']})")

    main_guard(main, argv)


def resolve_data_dir(dataset: str) -> Path:
    """A dataset name (a folder under data/) or a path to a prepared folder."""
    path = Path(dataset)
    if not path.is_dir():
        path = REPO_ROOT / "data" / dataset
    if not (path / TOKENIZER_FILE).is_file() and not is_data_folder(path):
        raise UserError(f"dataset {dataset!r} is not prepared: {path / TOKENIZER_FILE} is missing; run "
                        f"python data/{path.name}/prepare.py (or give --dataset=PATH to a prepared folder)")
    return path


def load_split(data_dir: Path, split: str, block_size: int) -> np.ndarray:
    """The token stream of one split as a read-only memmap; it must hold at least one block plus its target,
    and as many tokens as tokenizer.json says (a .bin file from another prepare, or cut short, does not)."""
    description = read_description(data_dir)
    path = data_dir / f"{split}.bin"
    rerun = f"rerun python data/{data_dir.name}/prepare.py"
    if not path.is_file():
        raise UserError(f"{path} is missing; {rerun}")
    dtype = np.dtype(description["dtype"])
    size = path.stat().st_size
    expected = description.get(f"{split}_tokens")
    if size % dtype.itemsize or (expected is not None and size != expected * dtype.itemsize):
        raise UserError(f"{path} holds {size} bytes, but {TOKENIZER_FILE} says {expected} {dtype.name} tokens "
                        f"({'?' if expected is None else expected * dtype.itemsize} bytes): the dataset is damaged "
                        f"or half-prepared; {rerun}")
    if size // dtype.itemsize < block_size + 1:
        raise UserError(f"{path} holds {size // dtype.itemsize} tokens, too few for one block: "
                        f"block_size={block_size} needs at least {block_size + 1}; use a smaller block_size "
                        "or a longer corpus")
    return np.memmap(path, dtype=dtype, mode="r")


def sample_offsets(data_length: int, block_size: int, count: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(data_length - block_size, (count,), generator=generator)


def get_batch(data: np.ndarray, offsets: torch.Tensor, block_size: int, device: torch.device,
              vocab_size: int | None = None) -> tuple:
    """Inputs and next-token targets (len(offsets), block_size), moved to device.

    With vocab_size, every id is checked to lie below it, here on the CPU: the compiled model skips its own
    check, and a damaged .bin file must not index past the embedding (on a GPU, a device-side assert).
    """
    windows = np.stack([data[i:i + block_size + 1] for i in offsets.tolist()])
    if vocab_size is not None and windows.size and int(windows.max()) >= vocab_size:
        where = getattr(data, "filename", None) or "the data"
        raise UserError(f"token id {int(windows.max())} in {where} is outside the vocabulary (vocab_size="
                        f"{vocab_size}): the file is damaged or from another tokenizer; rerun its prepare.py")
    windows = torch.from_numpy(windows.astype(np.int64))
    x, y = windows[:, :-1], windows[:, 1:]
    if device.type == "cuda":  # pinned memory lets the copy overlap with the GPU's work
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)
