"""Token streams on disk: text -> tokenizer.json + train.bin + val.bin + test.bin, and random batches back out.

The split rule of a single text (every data/<name>/prepare.py but the corpus one, SINGLE_TEXT_RULE): in text
order, train, then test, then val: val the last val_fraction of the characters, test the test_fraction before it,
each cut moved back to the last place where a piece of the text starts (cuts.text_cut). The cuts depend on the
text and the fractions alone, so every tokenizer (char, gpt2, a bpe learned from the train part) holds the same
text in each split, and its tokens are those of the whole text. tokenizer.json records the split (rule,
fractions, token counts and a SHA-256 of each .bin): split_identity() is what a run records and checks.
Datasets prepared before this rule cut char and gpt2 in tokens (OLD_SINGLE_TEXT_RULE); they still load.
"""

import hashlib
import io
import json
import os
import re
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from errors import OfflineError, UserError
from files import atomic_files, file_sha256, replace_files, special_file_kind
from text.bpe_train import TokenizerConfig, learn_bpe
from text.cuts import stream_pieces, text_cut
from text.nanogpt_data import check_data_folder, is_data_folder
from text.tokenizer import (
    DATASET_FILES,
    TOKENIZER_FILE,
    CharTokenizer,
    GPT2Tokenizer,
    check_vocabulary,
    preparer_command,
    read_description,
    recorded_description,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("train", "val", "test")
SINGLE_TEXT_RULE = ("train | test | val in text order, cut in characters: val the last val_fraction, test the "
                    "test_fraction before it, each cut moved back to where a piece of the text starts")
# The rule before, when char and gpt2 cut their token stream: its datasets load and resume, none is prepared again.
OLD_SINGLE_TEXT_RULE = "train | test | val in text order: val the last val_fraction, test the test_fraction before it"
# A single text is held in memory ~20 times over (docs/data_and_tokenizers.md); a larger one goes to data/corpus/.
MAX_TEXT_BYTES = 1 << 28


@dataclass
class PrepareConfig:
    input: str = ""  # a UTF-8 text file to train on; empty: the dataset's default text
    val_fraction: float = 0.1  # share of the characters, taken from the end, held out for validation
    test_fraction: float = 0.1  # share held out for the final test, taken just before val (0: no test split)
    dtype: str = "auto"  # token dtype on disk: auto (uint16, uint32 when the vocabulary needs it) | uint16 | uint32
    out_dir: str = ""  # where the dataset goes; empty: data/<name> (--input: data/<file name>_<tokenizer>)
    overwrite: bool = False  # replace a dataset already prepared in out_dir
    progress: bool = True  # show a tqdm bar while a BPE learns

    def __post_init__(self) -> None:
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction={self.val_fraction} must be in (0, 1)")
        check_test_fraction(self.test_fraction, self.val_fraction)
        if self.dtype not in ("auto", "uint16", "uint32"):
            raise ValueError(f"dtype={self.dtype!r} must be auto, uint16 or uint32")


def check_test_fraction(test_fraction: float, val_fraction: float) -> None:
    if not 0.0 <= test_fraction < 1.0 or not val_fraction + test_fraction < 1.0:
        raise ValueError(f"test_fraction={test_fraction} must be in [0, 1) and leave text for training: "
                         f"val_fraction + test_fraction = {val_fraction + test_fraction} must be below 1")


def check_overwrite(out: Path, overwrite: bool) -> None:
    """Refuse to replace a prepared dataset unless asked: runs trained on it could no longer resume."""
    if out.exists() and not out.is_dir():
        raise UserError(f"out_dir {str(out)!r} is a file, not a folder; choose another --out_dir")
    existing = [name for name in DATASET_FILES if (out / name).exists()]
    if existing and not overwrite:
        raise UserError(f"{out} already holds a dataset ({', '.join(existing)}); pass --overwrite=True to replace "
                        "it, or choose another --out_dir")


def read_text(path: str | os.PathLike, what: str = "input file") -> str:
    """The UTF-8 text of a file the user named, its line ends \n (\r\n and a lone \r read as \n, as Python's text
    mode reads them, and said on stderr); anything else (missing, a folder, binary, empty) a UserError."""
    file = Path(path)
    if file.is_dir():
        raise UserError(f"{what} {str(path)!r} is a folder, not a text file")
    if kind := special_file_kind(file):
        raise UserError(f"{what} {str(path)!r} is {kind}, not a regular file; give the path of a text file")
    if not file.is_file():
        raise UserError(f"{what} {str(path)!r} does not exist")
    if file.stat().st_size > MAX_TEXT_BYTES:
        raise UserError(f"{what} {str(path)!r} holds {file.stat().st_size:,} bytes, more than the "
                        f"{MAX_TEXT_BYTES:,} this preparer holds in memory; use data/corpus/prepare.py --input=PATH")
    try:
        with file.open(encoding="utf-8", newline="") as handle:  # line ends as written, to say what becomes of \r
            text = handle.read()
    except UnicodeDecodeError as e:
        raise UserError(f"{what} {str(path)!r} is not UTF-8 text: byte {e.object[e.start]:#x} at offset "
                        f"{e.start} cannot be decoded") from None
    except OSError as e:
        raise UserError(f"{what} {str(path)!r} cannot be read: {e.strerror}") from None
    if not text:
        raise UserError(f"{what} {str(path)!r} is empty")
    if carriage_returns := text.count("\r"):  # Python's text mode, as score.py reads a text
        print(f"note: {what} {str(path)!r} holds {carriage_returns:,} carriage returns (Windows line ends): read "
              "as newlines", file=sys.stderr)
        text = text.replace("\r\n", "\n").replace("\r", "\n")
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


def split_text(text: str, config: PrepareConfig) -> dict[str, str]:
    """The train, test and val text of a single text by SINGLE_TEXT_RULE, the same for every tokenizer."""
    n_val, n_test = int(len(text) * config.val_fraction), int(len(text) * config.test_fraction)
    n_train = len(text) - n_val - n_test  # where the cuts would be without moving them
    test_start, val_start = text_cut(text, n_train), text_cut(text, n_train + n_test)
    parts = {"train": text[:test_start], "test": text[test_start:val_start], "val": text[val_start:]}
    sizes = {split: len(part) for split, part in parts.items()}
    if sizes["val"] < 2 or sizes["train"] < 2 or (config.test_fraction and sizes["test"] < 2):
        raise UserError(f"the corpus is too short: {len(text)} characters give {sizes['train']} train, "
                        f"{sizes['val']} val and {sizes['test']} test characters (val_fraction="
                        f"{config.val_fraction}, test_fraction={config.test_fraction}); each split needs at least 2: "
                        "use a longer --input or larger fractions")
    return parts


def tokenize(text: str, tokenizer: TokenizerConfig, config: PrepareConfig, progress: bool) -> tuple:
    """(the tokenizer, {split: ids}) of a single text, split by SINGLE_TEXT_RULE: each part encoded alone."""
    if tokenizer.tokenizer not in ("char", "gpt2", "bpe"):
        raise UserError(f"tokenizer {tokenizer.tokenizer!r} must be 'char', 'gpt2' or 'bpe'")
    parts = split_text(text, config)
    if tokenizer.tokenizer == "bpe":  # its merges are learned from the train part alone
        data = parts["train"].encode("utf-8")
        pieces = (piece for piece, _ in stream_pieces(io.BytesIO(data), 1 << 20, "the training text"))
        learned = learn_bpe(pieces, tokenizer.vocab_size, tokenizer.tokenizer_sample_bytes, len(data), progress)
    elif tokenizer.tokenizer == "char":
        learned = CharTokenizer.from_text(text)  # every character, so that val and test hold no unknown one
    else:
        learned = GPT2Tokenizer()
    return learned, {split: learned.encode_documents(part) for split, part in parts.items()}


def split_record(rule: str, fractions: dict, counts: dict, digests: dict) -> dict:
    """What tokenizer.json says of the split: the rule, its settings, and the tokens and SHA-256 of each .bin."""
    return {"rule": rule, **fractions, **{f"{split}_tokens": counts[split] for split in SPLITS},
            "sha256": {split: digests[split] for split in SPLITS}}


def prepare(text: str, out_dir: str | os.PathLike, tokenizer: str | TokenizerConfig,
            config: PrepareConfig | None = None, source: str = "", progress: bool = False) -> dict:
    """Tokenize text and write tokenizer.json, train.bin, val.bin and test.bin to out_dir; returns the
    description. tokenizer is a kind (char, gpt2) or a TokenizerConfig (bpe needs its vocab_size)."""
    config = config or PrepareConfig()
    if isinstance(tokenizer, str):
        if tokenizer not in ("char", "gpt2"):
            raise UserError(f"tokenizer {tokenizer!r} must be 'char' or 'gpt2' (bpe: pass a TokenizerConfig)")
        tokenizer = TokenizerConfig(tokenizer=tokenizer)
    learned, ids = tokenize(text, tokenizer, config, progress)
    dtype = token_dtype(learned.vocab_size, config.dtype)
    data = {split: np.ascontiguousarray(ids[split].astype(dtype)) for split in SPLITS}
    counts = {split: len(ids[split]) for split in SPLITS}
    split = split_record(SINGLE_TEXT_RULE, {"val_fraction": config.val_fraction,
                                            "test_fraction": config.test_fraction}, counts,
                         {name: hashlib.sha256(data[name]).hexdigest() for name in SPLITS})
    description = {**recorded_description(learned), "dtype": dtype.name,
                   **{f"{name}_tokens": counts[name] for name in SPLITS}, "source": source, "split": split}
    # All four are written in full before any replaces the old dataset: a failure leaves that one whole.
    with replace_files(Path(out_dir), DATASET_FILES) as (train_temp, val_temp, test_temp, description_temp):
        for name, temp in (("train", train_temp), ("val", val_temp), ("test", test_temp)):
            temp.write_bytes(memoryview(data[name]))  # not tofile: its full-disk error has no errno, only a count
        description_temp.write_text(json.dumps(description, indent=1), encoding="utf-8")
    return description


def prepare_main(argv: list[str], out_dir: Path, tokenizer_kind: str, default_text, about: str) -> None:
    """The command line of every data/<name>/prepare.py. default_text() gives the text when --input is not set;
    tokenizer_kind is the dataset's tokenizer when --tokenizer is not set."""
    from dataclasses import replace

    from errors import OptionError, main_guard
    from options import parse_options

    def main(argv: list[str]) -> None:
        config, tokenizer = parse_options(argv, (PrepareConfig, TokenizerConfig),
                                          prog=f"data/{out_dir.name}/prepare.py", description=about)
        if not tokenizer.tokenizer:
            try:
                tokenizer = replace(tokenizer, tokenizer=tokenizer_kind)
            except ValueError as e:
                raise OptionError(str(e)) from None
        out = Path(config.out_dir) if config.out_dir else default_out_dir(out_dir, config.input, tokenizer)
        check_overwrite(out, config.overwrite)  # before the text is read or a tokenizer learned
        text = read_text(config.input) if config.input else default_text()
        description = prepare(text, out, tokenizer, config, source=config.input or "default",
                              progress=config.progress)
        print(f"{out}: {description['kind']} vocab {description['vocab_size']}, train "
              f"{description['train_tokens']:,} tokens, val {description['val_tokens']:,} tokens, test "
              f"{description['test_tokens']:,} tokens ({description['dtype']}); train on it with "
              f"--dataset={dataset_name(out)}")

    main_guard(main, argv)


def default_out_dir(preparer_dir: Path, input: str, tokenizer: TokenizerConfig) -> Path:
    """Where a preparer writes without --out_dir: its own folder for its own text; for --input, a folder beside it
    named after the file and the tokenizer, as the preparers' folders are (milton.txt: data/milton_char,
    data/milton_gpt2, data/milton_bpe8192), never the folder of another corpus (one with a preparer of its own)."""
    if not input:
        return preparer_dir
    name = re.sub(r"[^A-Za-z0-9._-]", "_", Path(input).stem).strip("._") or "text"
    kind = f"bpe{tokenizer.vocab_size}" if tokenizer.tokenizer == "bpe" else tokenizer.tokenizer
    folder = preparer_dir.parent / f"{name}_{kind}"
    if (folder / "prepare.py").is_file():
        raise UserError(f"--input={input!r} would be prepared into {folder}, the folder of data/{folder.name}/"
                        "prepare.py's own text; give --out_dir=PATH for it")
    return folder


def dataset_name(folder: Path) -> str:
    """What --dataset= names folder by (resolve_data_dir): its name under the repository's data/, else its path."""
    return folder.name if folder.resolve().parent == REPO_ROOT / "data" else str(folder)


def resolve_data_dir(dataset: str) -> Path:
    """A dataset name (a folder under data/) or a path to a prepared folder."""
    if not dataset.strip():
        raise UserError("dataset is empty; name a prepared folder under data/ (e.g. --dataset=shakespeare_char) "
                        "or give the path of one")
    path = Path(dataset)
    if path.exists() and not path.is_dir():
        raise UserError(f"dataset {dataset!r} is a file, not a dataset folder; give the folder that holds "
                        f"{TOKENIZER_FILE} and the .bin files")
    if not path.is_dir():
        path = REPO_ROOT / "data" / dataset
    check_data_folder(path)
    if (path / TOKENIZER_FILE).is_file() or is_data_folder(path):
        return path
    if all((path / name).is_file() for name in DATASET_FILES if name != TOKENIZER_FILE):
        raise UserError(f"{path} holds train.bin, val.bin and test.bin as this repository's preparers write them, "
                        f"but not the {TOKENIZER_FILE} that says what their ids mean (nanoGPT's folders have no "
                        f"test.bin, so it is not read as GPT-2's BPE); run {preparer_command(path, overwrite=True)}")
    if path.parent == REPO_ROOT / "data" and not (path / "prepare.py").is_file():  # a name --out_dir makes
        raise UserError(f"dataset {dataset!r} is not prepared: {path / TOKENIZER_FILE} is missing, and no preparer "
                        f"has that name (python data/{path.name}/prepare.py does not exist); run "
                        f"{preparer_command(path)}, or give --dataset=PATH to a prepared folder")
    raise UserError(f"dataset {dataset!r} is not prepared: {path / TOKENIZER_FILE} is missing; run "
                    f"{preparer_command(path)} (or give --dataset=PATH to a prepared folder)")


def check_recorded_tokens(data_dir: Path, description: dict, splits: tuple[str, ...]) -> None:
    """Refuse a tokenizer.json edited since its .bin files were written (check_vocabulary), and .bin files of these
    splits whose SHA-256 is not the one tokenizer.json records: a tokenizer.json copied from another dataset with
    the same token counts (its samples would be byte garbage), or .bin files replaced. Read once per run start; a
    file of another size is load_split's to report, unhashed, and a dataset prepared before splits were recorded
    (or nanoGPT's) has nothing to check."""
    check_vocabulary(data_dir, description)
    recorded = (split_identity(description) or {}).get("sha256", {})
    itemsize = np.dtype(description["dtype"]).itemsize
    for split in splits:
        path = data_dir / f"{split}.bin"
        expected_size = description.get(f"{split}_tokens", -1) * itemsize
        if split in recorded and path.is_file() and path.stat().st_size == expected_size \
                and file_sha256(path) != recorded[split]:
            raise UserError(f"{path} is not the file {data_dir / TOKENIZER_FILE} describes (its SHA-256 differs "
                            f"from the one recorded): that {TOKENIZER_FILE} was copied from another dataset, or the "
                            f".bin files were replaced; run {preparer_command(data_dir, overwrite=True)}")


def split_identity(description: dict) -> dict | None:
    """What identifies a dataset's split, from its tokenizer.json (or the copy a checkpoint holds): the rule,
    its fractions (and seed), the tokens and the SHA-256 of each .bin. Plain data, equal (==) for the same
    split; None for a dataset prepared before splits were recorded (re-prepare it with --overwrite=True)."""
    split = description.get("split")
    return split if isinstance(split, dict) else None


def split_difference(old: dict, new: dict) -> str | None:
    """How the splits of two descriptions differ (None if the same): what a resume or a reuse checks."""
    before, after = split_identity(old), split_identity(new)
    if before == after:
        return None
    if before is None or after is None:
        return "one of the two datasets was prepared before splits were recorded"
    # The rule names how a split was cut; the same fractions and .bin files are the same split under any rule.
    changed = sorted(k for k in before.keys() | after.keys() if k != "rule" and before.get(k) != after.get(k))
    if not changed:
        return None
    return "another split: " + ", ".join(f"{k} {before.get(k)!r} before, {after.get(k)!r} now"
                                         if k != "sha256" else "other tokens in the .bin files" for k in changed)


def load_split(data_dir: Path, split: str, block_size: int) -> np.ndarray:
    """The token stream of one split as a read-only memmap; it must hold at least one block plus its target,
    and as many tokens as tokenizer.json says (a .bin file from another prepare, or cut short, does not)."""
    description = read_description(data_dir)
    path = data_dir / f"{split}.bin"
    rerun = f"run {preparer_command(data_dir, overwrite=True)}"
    if split == "test" and "test_tokens" not in description:
        raise UserError(f"{data_dir} has no test split (it was prepared before test.bin existed); score on "
                        f"--eval_split=val, or {rerun}")
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
        fix = ("use a smaller block_size or a longer corpus" if split != "test" else
               "score on --eval_split=val, or prepare the data again with a larger --test_fraction (e.g. "
               f"{preparer_command(data_dir, overwrite=True)} --test_fraction=0.1)")
        raise UserError(f"{path} holds {size // dtype.itemsize} tokens, too few for one block: "
                        f"block_size={block_size} needs at least {block_size + 1}; {fix}")
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
        where = getattr(data, "filename", None)
        rerun = preparer_command(Path(where).parent, overwrite=True) if where else "its preparer"
        raise UserError(f"token id {int(windows.max())} in {where or 'the data'} is outside the vocabulary "
                        f"(vocab_size={vocab_size}): the file is damaged or from another tokenizer; run {rerun}")
    windows = torch.from_numpy(windows.astype(np.int64))
    x, y = windows[:, :-1], windows[:, 1:]
    if device.type == "cuda":  # pinned memory lets the copy overlap with the GPU's work
        # Contiguous first: x and y are strided views of windows, which pin_memory keeps strided, and the copy of a
        # strided tensor to the GPU goes through a contiguous copy in pageable memory (a blocking copy after a
        # stream sync, the pinned buffer unused).
        x, y = x.contiguous(), y.contiguous()
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)
