"""The preparers' faults, as tests/test_*_faults.py check the other scripts': every case ends with exit status 2,
one line naming the value, the limit and the fix, no traceback, and the dataset that was there byte for byte as
it was. The preparers' main() runs in this process, through errors.main_guard as the scripts do; a prepare that
fails writing leaves a trained run's dataset (conftest.py's run_copy) whole."""

import errno
import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, TEXT, assert_one_line_error, char_preparer, cli, corpus_main, digests

from errors import UserError
from text.dataset import load_split, prepare, split_difference, split_identity
from text.tokenizer import CharTokenizer


@pytest.fixture
def prepared(tmp_path, capsys) -> Path:
    code, out, err = cli(char_preparer(tmp_path / "data"), [], capsys)
    assert code == 0 and "test" in out, err
    return tmp_path / "data"


def test_another_input_over_a_prepared_dataset_needs_overwrite(prepared, tmp_path, capsys):
    before = digests(prepared)
    (tmp_path / "other.txt").write_text("a whole other text, with other characters! " * 50)
    into = f"--out_dir={prepared}"
    result = cli(char_preparer(prepared), [f"--input={tmp_path / 'other.txt'}", into], capsys)
    assert_one_line_error(*result, str(prepared), "already holds a dataset", "--overwrite=True")
    assert digests(prepared) == before
    code, _, err = cli(char_preparer(prepared), [f"--input={tmp_path / 'other.txt'}", into, "--overwrite=True"],
                       capsys)
    assert code == 0, err
    assert json.loads((prepared / "tokenizer.json").read_text())["source"] == str(tmp_path / "other.txt")


def test_an_out_dir_that_is_a_file(tmp_path, capsys):
    (tmp_path / "file").write_text("mine")
    result = cli(char_preparer(tmp_path / "data"), [f"--out_dir={tmp_path / 'file'}"], capsys)
    assert_one_line_error(*result, "is a file, not a folder", "--out_dir")
    assert (tmp_path / "file").read_text() == "mine"


@pytest.mark.parametrize("argv, fragments", [
    (["--tokenizer=bpe", "--vocab_size=100"], ["vocab_size=100 must be in [257, ", "--tokenizer=bpe"]),
    (["--tokenizer=bpe"], ["vocab_size=0 must be in [257, ", "e.g. --vocab_size=2048"]),
    (["--vocab_size=512"], ["vocab_size=512 applies to --tokenizer=bpe only"]),
    (["--tokenizer=char", "--tokenizer_sample_bytes=5000"], ["tokenizer_sample_bytes=5000 applies to "
                                                             "--tokenizer=bpe only", "it would do nothing"]),
    (["--tokenizer=bpe", "--vocab_size=2000"], ["vocab_size=2000 needs 1,743 merges", "bytes of training text"]),
    (["--tokenizer=bpe", "--vocab_size=400"], ["vocab_size=400 is more than this training text allows",
                                               "use --vocab_size="]),
    (["--tokenizer=wordpiece"], ["tokenizer='wordpiece' must be char, gpt2 or bpe"]),
    (["--test_fraction=0.95"], ["test_fraction=0.95", "must be below 1"]),
    (["--val_fraction=0.001"], ["too short", "each split needs at least 2"]),
])
def test_bad_tokenizer_and_split_settings_keep_the_old_dataset(prepared, tmp_path, capsys, argv, fragments):
    before = digests(prepared)
    (tmp_path / "small.txt").write_text("abab abab cdcd. " * 40)  # 640 bytes: 511 of them for training
    result = cli(char_preparer(prepared), [f"--input={tmp_path / 'small.txt'}", f"--out_dir={prepared}",
                                           "--overwrite=True", "--progress=False", *argv], capsys)
    assert_one_line_error(*result, *fragments)
    assert digests(prepared) == before


def test_an_input_too_large_to_hold_is_sent_to_the_corpus_preparer(prepared, tmp_path, capsys, monkeypatch):
    from text import dataset

    monkeypatch.setattr(dataset, "MAX_TEXT_BYTES", 100)
    before = digests(prepared)
    (tmp_path / "big.txt").write_text("x" * 101)
    result = cli(char_preparer(prepared), [f"--input={tmp_path / 'big.txt'}", f"--out_dir={prepared}",
                                           "--overwrite=True"], capsys)
    assert_one_line_error(*result, "holds 101 bytes, more than the 100", "data/corpus/prepare.py")
    assert digests(prepared) == before


def test_corpus_settings_that_size_processes_or_memory(tmp_path, capsys):
    (tmp_path / "a.txt").write_text(TEXT)
    for flag, fragments in [("--workers=1000", ["workers=1000 is more than", "per CPU core", "--workers="]),
                            ("--chunk_bytes=1000000000000", ["chunk_bytes=1000000000000", "at most"]),
                            ("--vocab_size=300", ["vocab_size=300 applies to --tokenizer=bpe only"]),
                            ("--tokenizer_sample_bytes=5000", ["tokenizer_sample_bytes=5000 applies to "
                                                               "--tokenizer=bpe only"])]:
        result = cli(corpus_main(), [f"--input={tmp_path / 'a.txt'}", f"--out_dir={tmp_path / 'out'}", flag],
                     capsys)
        assert_one_line_error(*result, *fragments)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("line, fragments", [
    ('{"text": 42}', ["d.jsonl:1: no text field 'text'", "its 'text' is a int, '42', not a string"]),
    ('{"text": null}', ["its 'text' is a NoneType"]),
    ('["text"]', ["the line is a JSON list, not an object"]),
    ('{"body": "x"}', ["the line has ['body']", "--text_field=NAME"]),
])
def test_a_json_line_without_text_says_what_it_holds(tmp_path, capsys, line, fragments):
    (tmp_path / "d.jsonl").write_text(line + "\n")
    result = cli(corpus_main(), [f"--input={tmp_path / 'd.jsonl'}", f"--out_dir={tmp_path / 'out'}",
                                 "--workers=1", "--progress=False", "--tokenizer=char"], capsys)
    assert_one_line_error(*result, *fragments)  # characters: the line is read as it is, offline too


# ---- the test split --------------------------------------------------------------------------------------------


def test_the_test_split_loads_and_an_old_dataset_names_the_fix(prepared, capsys):
    description = json.loads((prepared / "tokenizer.json").read_text())
    test = np.fromfile(prepared / "test.bin", dtype=np.uint16)
    assert load_split(prepared, "test", 8).tolist() == test.tolist() and len(test) == description["test_tokens"]
    # As an older preparer left it: train.bin, val.bin, and no word of a test split.
    (prepared / "test.bin").unlink()
    for key in ("test_tokens", "split"):
        del description[key]
    (prepared / "tokenizer.json").write_text(json.dumps(description))
    assert len(load_split(prepared, "val", 8)) == description["val_tokens"]  # what trained before still loads
    with pytest.raises(UserError, match=r"has no test split .* --eval_split=val") as caught:
        load_split(prepared, "test", 8)
    # A folder outside data/ has no data/<its name>/prepare.py (issue 28): its fix is a preparer's --out_dir.
    assert f"--out_dir={prepared} --overwrite=True" in str(caught.value)
    assert "data/data/prepare.py" not in str(caught.value)
    assert split_identity(description) is None


def test_split_identity_is_the_same_for_the_same_prepare_and_names_a_change(tmp_path):
    first = prepare(TEXT, tmp_path / "a", "char")
    again = prepare(TEXT, tmp_path / "b", "char")
    assert split_identity(first) == split_identity(again) and split_difference(first, again) is None
    identity = split_identity(first)
    assert (identity["val_fraction"], identity["test_fraction"]) == (0.1, 0.1)
    assert identity["train_tokens"] + identity["val_tokens"] + identity["test_tokens"] == len(TEXT)
    from text.dataset import PrepareConfig

    other = prepare(TEXT, tmp_path / "c", "char", PrepareConfig(test_fraction=0.2))
    assert "test_fraction 0.1 before, 0.2 now" in split_difference(first, other)
    assert "other tokens in the .bin files" in split_difference(first, other)
    assert split_difference(first, prepare(TEXT.upper(), tmp_path / "d", "char")) == ("another split: other "
                                                                                       "tokens in the .bin files")


def old_rule_description(description: dict, text: str, cut_at: tuple[int, int]) -> dict:
    """description as the code before cut a char dataset (OLD_SINGLE_TEXT_RULE): its token stream at cut_at."""
    from text.dataset import OLD_SINGLE_TEXT_RULE, split_record

    ids = CharTokenizer(description["chars"]).encode_documents(text).astype(np.uint16)
    parts = {"train": ids[:cut_at[0]], "test": ids[cut_at[0]:cut_at[1]], "val": ids[cut_at[1]:]}
    return {**description, "split": split_record(OLD_SINGLE_TEXT_RULE, {"val_fraction": 0.1, "test_fraction": 0.1},
                                                 {k: len(v) for k, v in parts.items()},
                                                 {k: hashlib.sha256(v).hexdigest() for k, v in parts.items()})}


def test_a_run_on_an_old_rule_dataset_resumes_unless_its_split_moved(tmp_path):
    from training.checkpoint import check_split

    text = TEXT[7:]  # 2423 characters: 80% of them ends inside a word
    new = prepare(text, tmp_path / "new", "char")
    sizes = [new["split"][f"{k}_tokens"] for k in ("train", "test")]
    same = old_rule_description(new, text, (sizes[0], sum(sizes)))  # the old rule cut where the new one does
    assert same["split"]["rule"] != new["split"]["rule"] and split_difference(same, new) is None
    check_split(same, new, tmp_path / "ckpt.pt", "new")  # the same tokens in each .bin: it resumes
    n = len(text)  # the old rule: the fractions of the tokens, not moved back to where a word starts
    old = old_rule_description(new, text, (n - 2 * int(0.1 * n), n - int(0.1 * n)))
    assert (old["split"]["train_tokens"], old["split"]["val_tokens"]) != (sizes[0], new["split"]["val_tokens"])
    check_split(old, old, tmp_path / "ckpt.pt", "old")  # on the old dataset it was trained on, it resumes
    with pytest.raises(UserError, match=r"trained on another split .*train_tokens .*cut by the rule before this "
                                        r"one .*start a new run") as error:
        check_split(old, new, tmp_path / "ckpt.pt", "new")
    assert "\n" not in str(error.value) and "--overwrite=True" not in str(error.value)


# ---- 4: prepare writes all three files or none -----------------------------------------------------------------


def test_prepare_that_fails_writing_leaves_the_old_dataset_whole(run_copy, monkeypatch):
    before = digests(run_copy / "data")

    def disk_full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", disk_full)  # tokenizer.json, the last of the three to be written
    with pytest.raises(UserError, match=r"could not write .*train\.bin.*No space left on device"):
        prepare("a whole other corpus, with other characters! " * 50, run_copy / "data", "char")
    assert digests(run_copy / "data") == before  # and no temporary file left beside them


@pytest.mark.parametrize("preparer", ["shakespeare_char", "corpus"])
def test_a_full_disk_is_one_line_naming_it(tmp_path, script_env, preparer):
    """Was '... : 20000 requested and 0 written': numpy's tofile drops the errno. A file size limit (RLIMIT_FSIZE,
    the kernel's EFBIG; Python ignores SIGXFSZ) fails the .bin write as a full disk (ENOSPC) does, in the same call."""
    (tmp_path / "text.txt").write_text(TEXT * 8, encoding="utf-8")
    extra = ["--tokenizer=char", "--workers=1", "--val_fraction=0.1"] if preparer == "corpus" else []
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))  # noqa: E731
    result = subprocess.run([sys.executable, str(REPO / "data" / preparer / "prepare.py"), "--progress=False",
                             f"--input={tmp_path / 'text.txt'}", f"--out_dir={tmp_path / 'out'}", *extra],
                            capture_output=True, text=True, env=script_env, preexec_fn=limit, timeout=120)
    assert_one_line_error(result.returncode, result.stdout, result.stderr, "could not write",
                          "train.bin", ": File too large; nothing was written")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_full_disk_names_no_space_left(tmp_path, capsys, monkeypatch):
    """ENOSPC itself, raised by the write of the first .bin file."""
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")

    def disk_full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_bytes", disk_full)
    result = cli(char_preparer(tmp_path / "data"), [f"--input={tmp_path / 'text.txt'}"], capsys)
    assert_one_line_error(*result, "train.bin", "No space left on device; nothing was written")


def test_windows_line_ends_are_read_as_newlines_and_said(tmp_path, capsys):
    """score.py reads a text's \\r the same way (tests/test_score.py): both as Python's text mode, both say so."""
    (tmp_path / "unix.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "windows.txt").write_bytes(TEXT.replace("All:\n", "All:\r").replace("\n", "\r\n").encode("utf-8"))
    for name in ("unix", "windows"):
        code, _, err = cli(char_preparer(tmp_path / name), [f"--input={tmp_path / f'{name}.txt'}",
                                                            f"--out_dir={tmp_path / name}"], capsys)
        assert code == 0, err
    assert err.strip() == (f"note: input file {str(tmp_path / 'windows.txt')!r} holds {TEXT.count(chr(10))} "
                           "carriage returns (Windows line ends): read as newlines")
    described = [json.loads((tmp_path / name / "tokenizer.json").read_text()) for name in ("windows", "unix")]
    assert [{**d, "source": ""} for d in described] == [{**described[1], "source": ""}] * 2  # no \r in chars
    for split in ("train", "val", "test"):  # the lone \r of 'All:\r' too
        assert (tmp_path / "windows" / f"{split}.bin").read_bytes() == (tmp_path / "unix" / f"{split}.bin").read_bytes()
