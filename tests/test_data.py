"""tokenizer.py, dataset.py and data/*/prepare.py, each against something independent: the text itself (token
streams must decode back to it), tiktoken called directly, NumPy's own integer limits, direct slicing of the
token array. Everything is written under tmp_path; the prepare.py scripts run from a copy of the repo there."""

import importlib.util
import json
import math
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import assert_one_line_error, char_preparer, cli, digests

from errors import UserError
from text import dataset
from text.bpe_train import TokenizerConfig
from text.cuts import text_cut
from text.dataset import (
    PrepareConfig,
    get_batch,
    load_split,
    prepare,
    read_text,
    resolve_data_dir,
    sample_offsets,
    token_dtype,
)
from text.tokenizer import TOKENIZER_FILE, CharTokenizer, GPT2Tokenizer, from_description, load_tokenizer

REPO = Path(__file__).resolve().parents[1]
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 20


def read_bins(folder: Path) -> tuple[dict, np.ndarray, np.ndarray]:
    description = json.loads((folder / TOKENIZER_FILE).read_text(encoding="utf-8"))
    dtype = np.dtype(description["dtype"])
    return description, np.fromfile(folder / "train.bin", dtype=dtype), np.fromfile(folder / "val.bin", dtype=dtype)


def read_test(folder: Path) -> np.ndarray:
    description = json.loads((folder / TOKENIZER_FILE).read_text(encoding="utf-8"))
    return np.fromfile(folder / "test.bin", dtype=np.dtype(description["dtype"]))


def all_tokens(folder: Path) -> np.ndarray:
    """The three splits in text order (train, test, val): the whole text's tokens."""
    _, train, val = read_bins(folder)
    return np.concatenate([train, read_test(folder), val])


# ---- tokenizers ---------------------------------------------------------------------------------------------


def test_char_tokenizer_round_trip_and_sorted_vocabulary():
    text = "hello, World! üñí\n"
    tokenizer = CharTokenizer.from_text(text)
    assert tokenizer.chars == "".join(sorted(set(text)))
    assert tokenizer.vocab_size == len(set(text))
    ids = tokenizer.encode(text)
    assert ids == [sorted(set(text)).index(c) for c in text]
    assert tokenizer.decode(ids) == text
    assert from_description(json.loads(json.dumps(tokenizer.description()))).encode(text) == ids


def test_char_tokenizer_unknown_character_is_named():
    tokenizer = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match="'z'"):
        tokenizer.encode("abz")


@pytest.mark.gpt2_bpe
def test_gpt2_tokenizer_is_tiktokens_gpt2():
    tokenizer = GPT2Tokenizer()
    assert tokenizer.encode("Hello world") == [15496, 995]
    assert tokenizer.decode([15496, 995]) == "Hello world"
    assert tokenizer.vocab_size == 50257
    assert tokenizer.encode("<|endoftext|>") == [50256] == [tokenizer.start_token()]
    assert tokenizer.encode_documents(TEXT).tolist() == tokenizer.encoding.encode_ordinary(TEXT)


def test_unknown_tokenizer_kind_and_missing_description(tmp_path):
    with pytest.raises(ValueError, match="'bytes'"):
        from_description({"kind": "bytes"})
    with pytest.raises(UserError, match="prepare.py"):
        load_tokenizer(tmp_path)


# ---- prepare ------------------------------------------------------------------------------------------------


def cut_by_hand(text: str, offset: int) -> int:
    """The last place at or before offset where a piece of GPT-2's pre-tokenization must start, found one
    character at a time: after a newline, a printable ASCII character other than space; or a space after one."""
    def printable(c: str) -> bool:
        return "!" <= c <= "~"

    for i in range(offset, 0, -1):
        if (text[i - 1] == "\n" and printable(text[i])) or (text[i] == " " and printable(text[i - 1])):
            return i
    return offset


def split_by_hand(text: str, val_fraction: float = 0.1, test_fraction: float = 0.1) -> dict[str, str]:
    n_val, n_test = int(len(text) * val_fraction), int(len(text) * test_fraction)
    test_start = cut_by_hand(text, len(text) - n_val - n_test)
    val_start = cut_by_hand(text, len(text) - n_val)
    return {"train": text[:test_start], "test": text[test_start:val_start], "val": text[val_start:]}


def decoded_splits(folder: Path) -> dict[str, str]:
    tokenizer = load_tokenizer(folder)
    _, train, val = read_bins(folder)
    return {"train": tokenizer.decode(train.tolist()), "test": tokenizer.decode(read_test(folder).tolist()),
            "val": tokenizer.decode(val.tolist())}


@pytest.mark.parametrize("text, offset, cut", [("ab cd", 4, 2), ("ab\ncd", 4, 3), ("abcd", 2, 2),
                                                ("a\n\ncd", 4, 3), ("ab  cd", 5, 2), ("ab\n cd", 5, 5),
                                                ("aé bc", 4, 4), ("xé a bc", 6, 4), ("ab cd", 2, 2)])
def test_text_cut_by_hand(text, offset, cut):
    """Line starts, word starts, none (the offset itself), a space after a non-ASCII letter (no word start),
    and a cut after a two-byte character (the byte offset turned back into characters)."""
    assert text_cut(text, offset) == cut == cut_by_hand(text, offset)


@pytest.mark.parametrize("val_fraction", [0.1, 0.25, 0.5])
def test_char_prepare_round_trip_and_split_sizes(tmp_path, val_fraction):
    description = prepare(TEXT, tmp_path, "char", PrepareConfig(val_fraction=val_fraction))
    stored, train, val = read_bins(tmp_path)
    assert stored == description
    assert train.dtype == np.uint16
    chars = sorted(set(TEXT))
    test = read_test(tmp_path)
    assert "".join(chars[i] for i in all_tokens(tmp_path)) == TEXT
    assert decoded_splits(tmp_path) == split_by_hand(TEXT, val_fraction)
    assert 0 <= len(val) - int(val_fraction * len(TEXT)) < 10  # moved back at most to the word's start
    assert abs(len(test) - int(0.1 * len(TEXT))) < 10 and len(train) + len(test) + len(val) == len(TEXT)
    assert (description["train_tokens"], description["val_tokens"]) == (len(train), len(val))
    assert description["test_tokens"] == len(test)


@pytest.mark.gpt2_bpe
def test_gpt2_prepare_uses_uint16_and_gpt2_ids(tmp_path, corpus_text):
    text = corpus_text[:5000]
    description = prepare(text, tmp_path, "gpt2")
    _, train, val = read_bins(tmp_path)
    assert description["kind"] == "gpt2" and description["vocab_size"] == 50257
    assert train.dtype == np.uint16
    ids = all_tokens(tmp_path)
    assert ids.max() < 50257
    # Cut where pieces start, the splits' tokens are the whole text's, as tiktoken encodes it in one call.
    assert ids.tolist() == GPT2Tokenizer().encoding.encode_ordinary(text)
    assert decoded_splits(tmp_path) == split_by_hand(text)


@pytest.mark.gpt2_bpe
def test_every_tokenizer_holds_the_same_text_in_each_split(tmp_path, corpus_text):
    """char, GPT-2 and a learned BPE prepared from one text: the same characters in train, test and val, cut
    where the text allows it. 20,000 characters: about a second in all."""
    text = corpus_text[:20_000]
    expected = split_by_hand(text)
    for kind in ("char", "gpt2", TokenizerConfig(tokenizer="bpe", vocab_size=300)):
        folder = tmp_path / (kind if isinstance(kind, str) else "bpe")
        description = prepare(text, folder, kind)
        assert decoded_splits(folder) == expected, description["kind"]
        assert description["split"]["rule"] == dataset.SINGLE_TEXT_RULE
    assert 0 <= int(0.8 * len(text)) - len(expected["train"]) < 40  # the fraction's offset, moved back a word


def test_token_dtype_limits():
    assert token_dtype(65) == np.uint16
    assert token_dtype(2**16) == np.uint16  # ids 0..65535
    assert token_dtype(2**16 + 1) == np.uint32
    assert token_dtype(50257, "uint32") == np.uint32
    assert token_dtype(2**16, "uint16") == np.uint16
    assert np.iinfo(token_dtype(2**16)).max == 2**16 - 1
    with pytest.raises(ValueError, match=r"70000.*uint16"):
        token_dtype(70000, "uint16")


def test_prepare_writes_the_requested_dtype(tmp_path):
    prepare(TEXT, tmp_path, "char", PrepareConfig(dtype="uint32"))
    description, train, val = read_bins(tmp_path)
    assert description["dtype"] == "uint32"
    assert (tmp_path / "train.bin").stat().st_size == 4 * len(train)
    assert load_split(tmp_path, "train", 8).tolist() == train.tolist()
    assert CharTokenizer.from_text(TEXT).decode(all_tokens(tmp_path).tolist()) == TEXT


def test_prepare_rejects_a_dtype_too_small_for_the_vocabulary(tmp_path):
    text = "".join(chr(0x10000 + i) for i in range(70000))  # 70,000 distinct characters
    with pytest.raises(ValueError, match=r"vocab_size=70000.*uint16"):
        prepare(text, tmp_path / "out", "char", PrepareConfig(dtype="uint16"))
    assert not (tmp_path / "out").exists()
    description = prepare(text, tmp_path / "auto", "char")
    _, train, val = read_bins(tmp_path / "auto")
    assert description["dtype"] == "uint32" and int(max(train.max(), val.max())) == 69999


def test_corpus_too_short_for_the_split(tmp_path):
    with pytest.raises(ValueError, match="too short"):
        prepare("abcdefghij", tmp_path / "out", "char")  # 10 tokens: 1 for val
    assert not (tmp_path / "out").exists()
    prepare("abcdefghijklmnopqrst", tmp_path / "ok", "char")  # 20 tokens: 2 for val, the least allowed
    assert len(read_bins(tmp_path / "ok")[2]) == 2


@pytest.mark.parametrize("bad, message", [(dict(val_fraction=0.0), r"val_fraction=0\.0 must be in \(0, 1\)"),
                                          (dict(val_fraction=1.0), r"val_fraction=1\.0 must be in \(0, 1\)"),
                                          (dict(dtype="int8"), r"dtype='int8' must be auto, uint16 or uint32")])
def test_prepare_config_validation(bad, message):
    with pytest.raises(ValueError, match=message):
        PrepareConfig(**bad)


def test_unknown_tokenizer_kind_in_prepare():
    with pytest.raises(ValueError, match="'words'"):
        prepare(TEXT, "unused", "words")


# ---- reading text -------------------------------------------------------------------------------------------


def test_read_text_errors(tmp_path):
    with pytest.raises(UserError, match="missing.txt"):
        read_text(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.txt.*empty"):
        read_text(tmp_path / "empty.txt")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ValueError, match=r"bad\.txt.*not UTF-8.*0xff"):
        read_text(tmp_path / "bad.txt")
    (tmp_path / "good.txt").write_bytes("ünï\n".encode())
    assert read_text(tmp_path / "good.txt") == "ünï\n"


def test_download_times_out_quickly_with_a_hint_to_use_input(tmp_path):
    """A server that accepts the connection and never answers: the download must give up after `timeout`."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    url = f"http://127.0.0.1:{server.getsockname()[1]}/input.txt"
    try:
        started = time.perf_counter()
        with pytest.raises(ConnectionError, match="--input"):
            dataset.download_text(url, tmp_path / "input.txt", timeout=1.0)
        assert time.perf_counter() - started < 5
    finally:
        server.close()
    assert not (tmp_path / "input.txt").exists()


def test_download_text_reads_an_existing_file_without_network(tmp_path, monkeypatch):
    (tmp_path / "input.txt").write_text("already here\n", encoding="utf-8")
    monkeypatch.setattr(dataset.urllib.request, "urlopen", lambda *a, **k: pytest.fail("no download expected"))
    assert dataset.download_text("http://example.invalid/x", tmp_path / "input.txt") == "already here\n"


# ---- the prepare.py scripts ---------------------------------------------------------------------------------


def load_prepare_module(name: str):
    spec = importlib.util.spec_from_file_location(f"prepare_{name}", REPO / "data" / name / "prepare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def no_network(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("network access")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_python_docs_default_corpus_prepares_without_network(tmp_path, monkeypatch):
    no_network(monkeypatch)
    module = load_prepare_module("python_docs_char")
    text = module.python_docs_text()
    assert len(text) > 100_000 and "with" in text
    description = prepare(text, tmp_path, "char")
    _, train, val = read_bins(tmp_path)
    assert description["vocab_size"] == len(set(text))
    assert load_tokenizer(tmp_path).decode(all_tokens(tmp_path).tolist()) == text


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """The repo's modules (its packages too) and prepare scripts copied under tmp_path: a prepare.py writes
    beside itself, here."""
    root = tmp_path / "repo"
    root.mkdir()
    for module in [*REPO.glob("*.py"), *(m for m in REPO.glob("*/*.py") if (m.parent / "__init__.py").is_file())]:
        (root / module.relative_to(REPO)).parent.mkdir(exist_ok=True)
        shutil.copy(module, root / module.relative_to(REPO))
    for script in REPO.glob("data/*/prepare.py"):
        (root / "data" / script.parent.name).mkdir(parents=True)
        shutil.copy(script, root / "data" / script.parent.name)
    return root


def run_prepare(root: Path, name: str, *args: str, env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in env.items() if k != "PYTHONPATH"}  # the copy's own modules, not the repo's
    return subprocess.run([sys.executable, str(root / "data" / name / "prepare.py"), *args], capture_output=True,
                          text=True, env=env, cwd=root, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["shakespeare_char", "shakespeare"])
def test_prepare_script_offline_fails_fast_and_mentions_input(repo_copy, script_env, name):
    started = time.perf_counter()
    result = run_prepare(repo_copy, name, env=script_env, timeout=30)
    assert time.perf_counter() - started < 15
    assert result.returncode == 2, result.stderr
    assert "--input" in result.stderr and "could not download" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in (repo_copy / "data" / name).iterdir()) == ["prepare.py"]


@pytest.mark.slow
def test_prepare_script_input_errors(repo_copy, script_env, tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\x00bad")
    for path, message in [(tmp_path / "missing.txt", "does not exist"), (tmp_path / "empty.txt", "is empty"),
                          (tmp_path / "bad.txt", "not UTF-8")]:
        result = run_prepare(repo_copy, "shakespeare_char", f"--input={path}", env=script_env)
        assert result.returncode == 2
        assert message in result.stderr and str(path) in result.stderr
        assert "Traceback" not in result.stderr
    assert sorted(p.name for p in (repo_copy / "data" / "shakespeare_char").iterdir()) == ["prepare.py"]


@pytest.mark.slow
def test_prepare_script_with_input(repo_copy, script_env, tmp_path):
    """Was: --input=milton.txt was written into data/shakespeare_char, under Shakespeare's name. A text given with
    --input goes to a folder named after its file and the tokenizer, never another corpus's, and the last line
    says how to train on it."""
    (tmp_path / "milton.txt").write_text(TEXT, encoding="utf-8")
    result = run_prepare(repo_copy, "shakespeare_char", "--input", str(tmp_path / "milton.txt"), "--val_fraction=0.2",
                         env=script_env)
    assert result.returncode == 0, result.stderr
    folder = repo_copy / "data" / "milton_char"
    description, train, val = read_bins(folder)
    assert f"vocab {len(set(TEXT))}" in result.stdout
    assert result.stdout.strip().splitlines()[-1].endswith("; train on it with --dataset=milton_char")
    assert len(val) == round(0.2 * len(TEXT)) and description["source"] == str(tmp_path / "milton.txt")
    assert CharTokenizer(description["chars"]).decode(all_tokens(folder).tolist()) == TEXT
    for name in ("shakespeare_char", "shakespeare", "python_docs_char"):
        assert sorted(p.name for p in (repo_copy / "data" / name).iterdir()) == ["prepare.py"]


@pytest.mark.parametrize("argv, folder", [([], "milton_char"), (["--tokenizer=bpe", "--vocab_size=300"],
                                                                "milton_bpe300"), (["--out_dir=OUT/mine"], "OUT/mine")])
def test_an_input_is_named_after_its_file_and_tokenizer(tmp_path, capsys, argv, folder):
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "milton.txt").write_text(TEXT, encoding="utf-8")
    argv = [arg.replace("OUT", str(tmp_path)) for arg in argv]
    code, out, err = cli(char_preparer(tmp_path / "data" / "shakespeare_char"),
                         [f"--input={tmp_path / 'texts' / 'milton.txt'}", "--progress=False", *argv], capsys)
    assert code == 0, err
    target = tmp_path / folder.removeprefix("OUT/") if folder.startswith("OUT/") else tmp_path / "data" / folder
    assert (target / "tokenizer.json").is_file()
    assert out.strip().endswith(f"--dataset={target}")  # a folder outside the repository's data/: its path
    assert not (tmp_path / "data" / "shakespeare_char").exists()


def test_an_input_named_as_another_corpus_is_refused_into_its_folder(tmp_path, capsys):
    (tmp_path / "data" / "python_docs_char").mkdir(parents=True)
    (tmp_path / "data" / "python_docs_char" / "prepare.py").write_text("# its own preparer\n")
    (tmp_path / "python_docs.txt").write_text(TEXT, encoding="utf-8")
    before = digests(tmp_path / "data")
    result = cli(char_preparer(tmp_path / "data" / "shakespeare_char"), [f"--input={tmp_path / 'python_docs.txt'}"],
                 capsys)
    assert_one_line_error(*result, "python_docs_char", "prepare.py's own text", "give --out_dir=PATH")
    assert digests(tmp_path / "data") == before


# ---- splits and batches -------------------------------------------------------------------------------------


def test_resolve_data_dir(tmp_path):
    with pytest.raises(UserError, match=r"python data/nothing_here/prepare.py"):
        resolve_data_dir("nothing_here")
    with pytest.raises(UserError, match="prepare.py"):
        resolve_data_dir(str(tmp_path))
    prepare(TEXT, tmp_path, "char")
    assert resolve_data_dir(str(tmp_path)) == tmp_path


def test_load_split_needs_one_block_plus_its_target(tmp_path):
    prepare(TEXT, tmp_path, "char")
    n_val = len(read_bins(tmp_path)[2])
    assert len(load_split(tmp_path, "val", n_val - 1)) == n_val
    with pytest.raises(ValueError, match=rf"holds {n_val} tokens.*block_size={n_val}"):
        load_split(tmp_path, "val", n_val)


def test_get_batch_targets_are_inputs_shifted_by_one(char_data):
    data = load_split(char_data, "train", 16)
    array = np.fromfile(char_data / "train.bin", dtype=np.uint16).astype(np.int64)
    offsets = torch.tensor([0, 5, len(array) - 17, 1234])
    x, y = get_batch(data, offsets, 16, torch.device("cpu"))
    assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (4, 16)
    for row, i in enumerate(offsets.tolist()):
        assert x[row].tolist() == array[i:i + 16].tolist()
        assert y[row].tolist() == array[i + 1:i + 17].tolist()
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_get_batch_for_a_gpu_pins_contiguous_tensors(char_data, monkeypatch):
    """On CUDA each batch is pinned and copied with non_blocking: only a contiguous pinned tensor goes to the GPU
    as one asynchronous copy; a strided one (x and y are views of one window) is first copied again into
    pageable memory by torch's copy. Without a GPU here, pin_memory and the copy are stood in for."""
    pinned, moved = [], []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a: pinned.append(self.is_contiguous()) or self)
    real_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        if args and isinstance(args[0], torch.device) and args[0].type == "cuda":
            moved.append((self.is_contiguous(), kwargs.get("non_blocking")))
            return self
        return real_to(self, *args, **kwargs)
    monkeypatch.setattr(torch.Tensor, "to", to)
    data = load_split(char_data, "train", 16)
    offsets = torch.tensor([0, 5, 1234])
    x, y = get_batch(data, offsets, 16, torch.device("cuda"))
    cpu_x, cpu_y = get_batch(data, offsets, 16, torch.device("cpu"))
    assert torch.equal(x, cpu_x) and torch.equal(y, cpu_y)
    assert pinned == [True, True] and moved == [(True, True), (True, True)]


def test_sample_offsets_cover_every_valid_start():
    generator = torch.Generator().manual_seed(0)
    offsets = sample_offsets(21, 16, 2000, generator)  # starts 0..4: the last target is token 20
    assert sorted(set(offsets.tolist())) == [0, 1, 2, 3, 4]
    data = np.arange(21, dtype=np.uint16)
    x, y = get_batch(data, offsets, 16, torch.device("cpu"))
    assert y.max().item() == 20 and x.shape == (2000, 16)
    assert math.isclose(np.bincount(offsets.numpy()).min() / 2000, 0.2, abs_tol=0.05)
