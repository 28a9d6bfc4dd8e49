"""text/dataset.py's faults, as train.py meets them (see docs/what_is_safe.md): a tokenizer.json that is
damaged, missing, copied from another dataset or holds a pattern that is no regular expression; a .bin file cut
short or holding ids outside the vocabulary; a dataset given by path, or by a name that no preparer has, told the
command that makes it; a nanoGPT data folder missing a .bin file or holding part of a token. Every case ends with
its exit code, one line that names the problem, no traceback, and the files that were there before byte-for-byte
as they were.

Most cases damage their own copy (the run_copy fixture) of one trained run's data (conftest.py's trained, trained
once for every test_*_faults.py). The preparers' own faults are test_prepare_faults.py's.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO, assert_one_line_error, cli, digests, flags, write_nanogpt_data

import train as train_module
from text.dataset import prepare

# ---- data a user gives --------------------------------------------------------------------------------------


def test_damaged_tokenizer_json(run_copy, capsys):
    (run_copy / "data" / "tokenizer.json").write_text('{"kind": "char", "chars": "ab')
    result = cli(train_module.main, flags(run_copy / "new", run_copy / "data"), capsys)
    assert_one_line_error(*result, "tokenizer.json is damaged", "prepare.py")


@pytest.mark.parametrize("split", ["train", "val"])
def test_bin_file_cut_short_or_from_another_prepare(run_copy, capsys, split):
    path = run_copy / "data" / f"{split}.bin"
    path.write_bytes(path.read_bytes()[:-6])
    result = cli(train_module.main, flags(run_copy / "new", run_copy / "data"), capsys)
    assert_one_line_error(*result, f"{split}.bin holds", "tokenizer.json says", "prepare.py")
    assert not (run_copy / "new" / "ckpt.pt").exists()


@pytest.mark.parametrize("compile_model", [False, True])
def test_token_ids_beyond_the_vocabulary_in_a_bin_file(run_copy, capsys, compile_model, monkeypatch):
    """The compiled model skips its own id check: the data is checked as it is batched, compiled or not."""
    if compile_model:  # torch.compile itself is slow to start; what matters is that the model's check is off
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    path = run_copy / "data" / "train.bin"
    tokens = np.fromfile(path, dtype=np.uint16)
    tokens[::7] = 60000  # a damaged file of the right size
    tokens.tofile(path)
    # Where the split's SHA-256 is recorded, the start refuses the file (issue 28); a dataset prepared before
    # splits were recorded has none, and its batches are what finds it.
    description = json.loads((run_copy / "data" / "tokenizer.json").read_text())
    del description["split"]
    (run_copy / "data" / "tokenizer.json").write_text(json.dumps(description))
    result = cli(train_module.main, flags(run_copy / "new", run_copy / "data"), capsys)
    assert_one_line_error(*result, "token id 60000", "train.bin", "outside the vocabulary")


def test_a_tokenizer_json_whose_pattern_is_not_a_regex_is_one_line_before_the_lock(tmp_path, corpus_text, capsys):
    """Was tiktoken's ValueError as a traceback, after out_dir and its train.lock were made."""
    from text.bpe_train import TokenizerConfig

    prepare(corpus_text[:3000], tmp_path / "data", TokenizerConfig(tokenizer="bpe", vocab_size=300))
    description = json.loads((tmp_path / "data" / "tokenizer.json").read_text())
    (tmp_path / "data" / "tokenizer.json").write_text(json.dumps({**description, "pattern": "(?:'s|\\\\p{L}+"}))
    before = digests(tmp_path / "data")
    result = cli(train_module.main, flags(tmp_path / "new", tmp_path / "data"), capsys)
    assert_one_line_error(*result, "tokenizer.json", "'pattern' that is a regular expression", "prepare.py")
    assert digests(tmp_path / "data") == before and not (tmp_path / "new").exists()


def test_a_tokenizer_json_whose_characters_were_swapped_is_refused_and_an_old_one_trains(run_copy, capsys):
    """Was accepted: the run trained on the .bin's ids and sampled them as other characters. prepare records the
    vocabulary's SHA-256 beside it; a dataset prepared before that (no vocabulary_sha256) trains as it did."""
    path = run_copy / "data" / "tokenizer.json"
    description = json.loads(path.read_text())
    chars = description["chars"]
    swapped = chars.replace("a", "\0").replace("e", "a").replace("\0", "e")
    path.write_text(json.dumps({**description, "chars": swapped}))
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "new", run_copy / "data"), capsys)
    assert_one_line_error(*result, "tokenizer.json does not say what its .bin files' ids meant when they were written",
                          "its characters or tokens were edited", "--overwrite=True")
    assert digests(run_copy) == before and not (run_copy / "new").exists()
    old = {key: value for key, value in description.items() if key != "vocabulary_sha256"}
    path.write_text(json.dumps(old))
    code, _, err = cli(train_module.main, flags(run_copy / "old", run_copy / "data"), capsys)
    assert code == 0 and (run_copy / "old" / "ckpt.pt").exists(), err


# ---- issue 28: datasets read silently with the wrong ids, and fixes that named no existing command ------------


def test_our_dataset_without_its_tokenizer_json_is_not_read_as_nanogpts(run_copy, capsys):
    """Was read as a nanoGPT GPT-2 folder: a 50,257-token model on 65-character data, without a word."""
    (run_copy / "data" / "tokenizer.json").unlink()
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "new", run_copy / "data"), capsys)
    assert_one_line_error(*result, str(run_copy / "data"), "test.bin", "not the tokenizer.json",
                          f"--out_dir={run_copy / 'data'} --overwrite=True")
    assert digests(run_copy) == before and not (run_copy / "new").exists()


def test_a_tokenizer_json_copied_from_another_dataset_is_refused(run_copy, corpus_text, capsys):
    """The same token counts and vocabulary, other tokens: only the SHA-256 its split records tells them apart."""
    # Two letters swapped: the same characters and cuts (splits are cut at line and word starts), other tokens.
    prepare(corpus_text[:5000].translate(str.maketrans("ae", "ea")), run_copy / "other", "char")
    shutil.copy(run_copy / "other" / "tokenizer.json", run_copy / "data" / "tokenizer.json")
    before = digests(run_copy)
    for argv in (flags(run_copy / "new", run_copy / "data"),
                 flags(run_copy / "run", run_copy / "data", init_from="resume", max_iters=8)):
        result = cli(train_module.main, argv, capsys)
        assert_one_line_error(*result, "train.bin is not the file", "SHA-256", "copied from another dataset",
                              "--overwrite=True")
    assert digests(run_copy) == before and not (run_copy / "new").exists()


def damage_dataset(data: Path, how: str) -> str:
    """Damage the dataset folder data; returns what --dataset to give."""
    if how == "tokenizer.json":
        (data / "tokenizer.json").write_text('{"kind": "char", "chars": "ab')
    elif how == "val.bin":
        (data / "val.bin").unlink()
    elif how == "ids":
        tokens = np.fromfile(data / "train.bin", dtype=np.uint16)
        tokens[:] = 999  # outside the vocabulary; the size, and the SHA-256 check skipped for an old dataset
        tokens.tofile(data / "train.bin")
        description = json.loads((data / "tokenizer.json").read_text())
        del description["split"]
        (data / "tokenizer.json").write_text(json.dumps(description))
    return str(data)


@pytest.mark.parametrize("how", ["tokenizer.json", "val.bin", "ids"])
def test_a_damaged_dataset_given_by_path_is_told_its_preparer_and_out_dir(run_copy, capsys, how):
    """Was told to run python data/data/prepare.py, which does not exist."""
    dataset = damage_dataset(run_copy / "data", how)
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "new", dataset), capsys)
    assert_one_line_error(*result, f"--out_dir={run_copy / 'data'} --overwrite=True",
                          "data/shakespeare_char/prepare.py")
    assert "data/data/prepare.py" not in result[2]
    assert digests(run_copy) == before and not (run_copy / "new" / "ckpt.pt").exists()


@pytest.mark.parametrize("dataset, fragments", [
    ("shakespeare_bpe1024", ["data/shakespeare_bpe1024/prepare.py does not exist", "run python data/shakespeare_char/"
                             "prepare.py --tokenizer=bpe --vocab_size=1024 --out_dir=data/shakespeare_bpe1024"]),
    ("python_docs_gpt2", ["run python data/python_docs_char/prepare.py --tokenizer=gpt2 "
                          "--out_dir=data/python_docs_gpt2"]),
    ("my_own_text", ["data/my_own_text/prepare.py does not exist", "--out_dir=data/my_own_text"]),
    ("", ["dataset is empty", "--dataset=shakespeare_char"]),
    (str(REPO / "README.md"), ["README.md' is a file, not a dataset folder"]),
])
def test_a_dataset_name_that_no_preparer_has_names_the_command_that_makes_it(tmp_path, capsys, dataset, fragments):
    """Names made with --out_dir (README's shakespeare_bpe1024) have no data/<name>/prepare.py of their own."""
    assert not (REPO / "data" / dataset / "tokenizer.json").exists()
    result = cli(train_module.main, flags(tmp_path / "new", dataset), capsys)
    assert_one_line_error(*result, *fragments)
    assert "data//prepare.py" not in result[2] and not (tmp_path / "new").exists()


# ---- issue 45: a damaged nanoGPT data folder was told of the tokenizer.json it never has -------------------------


@pytest.mark.parametrize("split, damage, fragments", [
    ("val", "remove", ["val.bin is missing: nanoGPT's prepare.py writes train.bin and val.bin; run it again"]),
    ("train", "remove", ["train.bin is missing: nanoGPT's prepare.py writes train.bin and val.bin; run it again"]),
    ("train", "one byte more", ["train.bin has 54,001 bytes, not a whole number of uint16 tokens",
                                "cut short or not nanoGPT's; prepare it again"]),
    ("val", "one byte more", ["val.bin has 6,001 bytes, not a whole number of uint16 tokens"]),
])
def test_a_damaged_nanogpt_data_folder_names_its_bin_file(tmp_path, corpus_text, capsys, split, damage, fragments):
    folder = write_nanogpt_data(tmp_path / "data" / "x", corpus_text)
    path = folder / f"{split}.bin"
    if damage == "remove":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes() + b"\0")
    before = digests(folder)
    result = cli(train_module.main, flags(tmp_path / "new", folder), capsys)
    assert_one_line_error(*result, str(path), *fragments)
    assert "tokenizer.json" not in result[2]
    assert digests(folder) == before and not (tmp_path / "new").exists()
