"""What every command shares, through errors.main_guard (see docs/what_is_safe.md): a user's error is one line
and exit status 2 while a bug keeps its traceback; output into a closed pipe ends quietly with SIGPIPE's status;
a device (/dev/null, /dev/zero) given as an input or config file is named as one.
"""

import os
import signal
import subprocess
import sys

import pytest
from helpers import REPO, assert_one_line_error, char_preparer, cli, corpus_main

import train as train_module
from errors import OptionError, main_guard

# ---- what main_guard catches --------------------------------------------------------------------------------


def test_main_guard_prints_user_errors_and_leaves_bugs_loud(capsys):
    def user_mistake(argv):
        raise OptionError("--batch_size=0 must be at least 1")

    def bug(argv):
        raise ValueError("an internal invariant broke")

    assert_one_line_error(*cli(user_mistake, [], capsys), "--batch_size=0")
    with pytest.raises(ValueError, match="internal invariant"):  # a bug keeps its traceback
        main_guard(bug, [])


# ---- issue 28: tracebacks that were left ------------------------------------------------------------------------


COMMANDS = ["train.py", "sample.py", "ablate.py", "bench.py", "-m training.memory", "data/shakespeare_char/prepare.py",
            "data/shakespeare/prepare.py", "data/python_docs_char/prepare.py", "data/corpus/prepare.py"]


@pytest.mark.parametrize("argv", [[command, "--help"] for command in COMMANDS] + [["-m training.memory"]],
                         ids=" ".join)
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_output_into_a_closed_pipe_ends_quietly(script_env, argv, buffered):
    """`python train.py --help | head -1`: the reader is gone before the help is written (here, before the
    command starts). No traceback, no message: the exit status of a command that SIGPIPE ended. Buffered (a
    shell's pipe), the write fails at the last flush, which Python's exit reported as its own BrokenPipeError."""
    env = {k: v for k, v in script_env.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        command = argv[0].split() if argv[0].startswith("-m ") else [str(REPO / argv[0])]  # a module: from REPO
        result = subprocess.run([sys.executable, *command, *argv[1:]], stdout=write_end, stderr=subprocess.PIPE,
                                text=True, env=env, timeout=120, cwd=REPO)
    finally:
        os.close(write_end)
    assert result.returncode == 128 + signal.SIGPIPE, result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize("path", ["/dev/null", "/dev/zero"])
def test_a_device_as_input_or_config_file_says_what_it_is(tmp_path, capsys, path):
    for main, argv, fragment in [
            (char_preparer(tmp_path / "data"), [f"--input={path}"], f"input file {path!r} is a device"),
            (corpus_main(), [f"--input={path}", f"--out_dir={tmp_path / 'data'}"], f"input {path!r} is a device"),
            (train_module.main, [path], f"config file {path!r} is a device")]:
        result = cli(main, argv, capsys)
        assert_one_line_error(*result, fragment, "not a regular file")
    assert not (tmp_path / "data").exists()
