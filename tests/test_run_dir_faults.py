"""training/run_dir.py's claim on out_dir, as train.py makes it (see docs/what_is_safe.md): a new run over an old
one is refused without --overwrite=True, and a new one that fails to start leaves the old whole; one training per
out_dir; an out_dir that is a file, read-only or nanoGPT's; a resume without a checkpoint makes no out_dir; a
train.lock left behind refuses no one. Every case ends with its exit code, one line that names the problem, no
traceback, and the files that were there before byte-for-byte as they were.

Each case damages its own copy (the run_copy fixture) of one trained run (conftest.py's trained, trained once for
every test_*_faults.py). test_run_dir.py checks the claim itself.
"""

import json
import os
from contextlib import ExitStack
from pathlib import Path

import pytest
from helpers import assert_one_line_error, cli, digests, flags, write_nanogpt_run

import train as train_module
from files import lock_folder
from training.checkpoint import load_checkpoint

# ---- 1, 2, 5: a new run over an old run ----------------------------------------------------------------------


def test_new_run_over_an_old_one_is_refused(run_copy, capsys):
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "run", run_copy / "data", max_iters=8), capsys)
    assert_one_line_error(*result, "already holds a run", "--init_from=resume", "--overwrite=True")
    assert digests(run_copy) == before


def test_overwrite_replaces_the_run_but_a_failed_start_keeps_it(run_copy, capsys):
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "run", run_copy / "data", overwrite=True, block_size=10**5,
                                          n_layer=1), capsys)  # fails loading the data, after the out_dir check
    assert_one_line_error(*result, "too few for one block")
    assert digests(run_copy) == before  # metrics.jsonl included: nothing is deleted before training starts
    code, out, err = cli(train_module.main, flags(run_copy / "run", run_copy / "data", overwrite=True,
                                                  max_iters=2, eval_interval=1), capsys)
    assert code == 0 and "done: 2 iterations" in out, err
    records = [json.loads(line) for line in (run_copy / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in records if "val_loss" in r] == [0, 1, 2]  # the new run's log alone
    assert load_checkpoint(run_copy / "run" / "ckpt.pt")["iter_num"] == 2


# ---- 6: one training per out_dir ----------------------------------------------------------------------------


def test_a_second_training_in_the_same_out_dir_is_refused(run_copy, capsys):
    before = digests(run_copy)
    with ExitStack() as stack:
        lock_folder(run_copy / "run", stack)  # as a training running in another process holds it
        result = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume",
                                              max_iters=6), capsys)
        assert_one_line_error(*result, "in use by a training already running", f"process {os.getpid()}")
        assert digests(run_copy) == before
    code, out, err = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume",
                                                  max_iters=6), capsys)
    assert code == 0 and "done: 6 iterations" in out, err  # released: the next one runs


# ---- issue 17: the run folder ----------------------------------------------------------------------------------


def test_out_dir_naming_a_file(run_copy, capsys):
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "run" / "metrics.jsonl", run_copy / "data"), capsys)
    assert_one_line_error(*result, "metrics.jsonl", "is a file, not a folder")
    assert digests(run_copy) == before


@pytest.mark.parametrize("inside", [False, True], ids=["out_dir", "a_folder_above_it"])
def test_out_dir_through_a_dangling_link_names_the_link(run_copy, tmp_path, capsys, inside):
    """Was: "cannot create out_dir=...: File exists"."""
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    out_dir = link / "run" if inside else link
    result = cli(train_module.main, flags(out_dir, run_copy / "data"), capsys)
    assert_one_line_error(*result, f"cannot create out_dir={str(out_dir)!r}: {link} is a dangling symbolic link (to "
                                   f"{tmp_path / 'gone'}, which does not exist); create its target, remove the link")
    assert link.is_symlink() and not (tmp_path / "gone").exists()


@pytest.mark.parametrize("how", ["chmod", "read-only file system"])
def test_resume_in_a_read_only_out_dir_is_one_line(run_copy, capsys, monkeypatch, how):
    run = run_copy / "run"
    if how == "chmod":
        if os.geteuid() == 0:
            pytest.skip("root writes any folder")
        run.chmod(0o555)
    else:  # what access() answers on a file system mounted read-only, for root too
        from training import run_dir

        monkeypatch.setattr(run_dir.os, "access", lambda path, mode: Path(path) != run)
    before = digests(run_copy)
    try:
        result = cli(train_module.main, flags(run, run_copy / "data", init_from="resume", max_iters=8), capsys)
    finally:
        run.chmod(0o755)
    assert_one_line_error(*result, f"out_dir={str(run)!r} cannot be written", "folder you can write")
    assert digests(run_copy) == before


def test_resume_without_a_checkpoint_makes_no_out_dir(run_copy, capsys):
    result = cli(train_module.main, flags(run_copy / "missing", run_copy / "data", init_from="resume"), capsys)
    assert_one_line_error(*result, "--init_from=resume needs", "missing/ckpt.pt", "--init_from=scratch")
    assert not (run_copy / "missing").exists()


def test_resume_in_nanogpts_out_dir_is_refused_before_it_is_locked(run_copy, capsys):
    ckpt = write_nanogpt_run(run_copy / "out-nanogpt")
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "out-nanogpt", run_copy / "data", init_from="resume"), capsys)
    assert_one_line_error(*result, f"{ckpt} is nanoGPT's checkpoint", f"--init_from={ckpt} --out_dir=NEW_DIR")
    assert digests(run_copy) == before
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["ckpt.pt"]  # no train.lock written there


def test_a_train_lock_left_behind_refuses_no_one(run_copy, capsys):
    """train.lock stays after a run (README: removing it would let two processes hold it); it is an flock,
    held only while its process lives, so a file left by a run, or by a kill -9, never refuses the next."""
    (run_copy / "run" / "train.lock").write_text("999999")
    code, out, err = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume",
                                                  max_iters=6), capsys)
    assert code == 0 and "done: 6 iterations" in out, err
