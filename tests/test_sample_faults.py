"""sample.py's faults (see docs/what_is_safe.md): sampling settings, sizes and seeds out of range; prompt files
that are folders, binary, missing, unreadable or devices; --start's and --stop's escapes; temperatures and top_p
too small for float32. Every case ends with its exit code, one line that names the problem and no traceback, and
reads nothing it should not (/dev/zero).

Each case samples from its own copy (the run_copy fixture) of one trained run (conftest.py's trained, trained once
for every test_*_faults.py). Damaged checkpoints are test_checkpoint_faults.py's.
"""

import os
import time

import pytest
from helpers import assert_one_line_error, cli

import sample

# ---- sampling input -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag, fragment", [
    ("--temperature=nan", "temperature=nan must be a finite number"),
    ("--temperature=inf", "temperature=inf must be a finite number"),
    ("--top_k=0", "top_k=0 must be >= 1"),
    ("--slide=0", "slide=0 must be >= 1"),
    ("--slide=99", "slide=99 must be at most the model's block_size=16"),
    ("--init_from=gtp2", "init_from='gtp2' must be one of resume, gpt2"),
])
def test_bad_sampling_settings_are_one_line(run_copy, capsys, flag, fragment):
    result = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", flag], capsys)
    assert_one_line_error(*result, fragment)


def test_keep_stop_where_the_tokenizer_has_no_end_of_text_is_refused_before_decoding(run_copy, capsys):
    """Was: sampled as without it: the char run's tokenizer has no <|endoftext|>, and no --stop was given. With a
    --stop it samples; from a config file (meant for models with an <|endoftext|>) it is not refused."""
    run = [f"--out_dir={run_copy / 'run'}", "--device=cpu", "--max_new_tokens=4"]
    code, out, err = cli(sample.main, [*run, "--keep_stop=True"], capsys)
    assert_one_line_error(code, out, err, "keep_stop is a setting of the stops (--stop, <|endoftext|>), and this run "
                          "has none (no --stop; this model's tokenizer has no <|endoftext|>): it would do nothing; "
                          "drop it, or give --stop=TEXT")
    assert out == ""  # no sample drawn
    code, out, err = cli(sample.main, [*run, "--keep_stop=True", "--stop=e"], capsys)
    assert code == 0 and "---------------" in out, err
    config = run_copy / "keep.py"
    config.write_text("keep_stop = True\n")
    code, out, err = cli(sample.main, [str(config), *run], capsys)
    assert code == 0 and "---------------" in out, err


@pytest.mark.parametrize("made", [False, True])
def test_an_out_dir_without_a_run_names_the_fix(tmp_path, capsys, made):
    """Was: "no checkpoint at out/ckpt.pt", no fix: what `python sample.py` said after the quick start, whose run is
    in out-python-docs-char."""
    if made:
        (tmp_path / "out").mkdir()
    result = cli(sample.main, [f"--out_dir={tmp_path / 'out'}", "--device=cpu"], capsys)
    where = "it holds" if made else "no such folder:"
    assert_one_line_error(*result, f"error: out_dir={str(tmp_path / 'out')!r} holds no run ({where} no best.pt or "
                          "ckpt.pt); give --out_dir=<the folder train.py wrote to> (its --out_dir), or "
                          "--init_from=<a ckpt.pt, or gpt2>")


@pytest.mark.parametrize("kind", ["folder", "binary", "missing", "unreadable"])
def test_bad_prompt_files_are_one_line(run_copy, capsys, kind):
    path = run_copy / "prompt"
    if kind == "folder":
        path.mkdir()
    elif kind in ("binary", "unreadable"):
        path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    if kind == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        path.chmod(0)
    expected = {"folder": "is a folder", "binary": "is not UTF-8 text", "missing": "does not exist",
                "unreadable": "cannot be read"}[kind]
    result = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", f"--start=FILE:{path}"], capsys)
    assert_one_line_error(*result, f"prompt file {str(path)!r}", expected)


# ---- issue 17: sampling --------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag, fragment", [
    ("--num_samples=100000000", "num_samples=100000000 must be in [1, 4096]"),
    ("--max_new_tokens=10000000000", "max_new_tokens=10000000000 must be in [0, 10,000,000]"),
    ("--seed=18446744073709551615", "seed=18446744073709551615 must be in [0, 2**64 - num_samples]"),
    ("--seed=-5", "seed=-5 must be in [0, 2**64 - num_samples]"),
    ("--dtype=float64", "dtype='float64' must be one of"),
    ("--stop=", "--stop='' would end every sample"),
])
def test_sampling_sizes_and_seeds_out_of_range_are_one_line(run_copy, capsys, flag, fragment):
    started = time.perf_counter()
    result = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", flag], capsys)
    assert_one_line_error(*result, fragment)
    assert time.perf_counter() - started < 5  # refused before a model, a generator or a batch is made


def test_a_temperature_too_small_to_divide_by_is_greedy(run_copy, capsys):
    def run(temperature: str) -> str:
        code, out, err = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", "--max_new_tokens=20",
                                           "--num_samples=2", f"--temperature={temperature}"], capsys)
        assert code == 0 and "Traceback" not in err, err
        return out

    assert run("1e-40") == run("0") == run("1e-7")


def test_a_top_p_below_float32s_least_keeps_the_most_likely_token(run_copy, capsys):
    """1e-300 is 0 in float32: every token's mass before it reached it, and all were dropped (a NaN softmax)."""
    def run(*flags: str) -> str:
        code, out, err = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", "--max_new_tokens=20",
                                           *flags], capsys)
        assert code == 0 and "Traceback" not in err, err
        return out

    assert run("--top_p=1e-300") == run("--temperature=0")


# ---- issue 28: sampling's text on the command line, and files that are not files -------------------------------


def test_stop_and_start_read_the_usual_escapes(run_copy, capsys):
    """--stop='\\n' was a backslash and an n, which no sample holds: "stop at the end of the line" never matched."""
    def samples(*flags: str) -> str:
        code, out, err = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", "--max_new_tokens=60",
                                           *flags], capsys)
        assert code == 0, err
        return out

    escaped = samples("--start=To be\\nor", "--stop=\\n")
    assert escaped == samples("--start=To be\nor", "--stop=\n")
    texts = escaped.split("---------------\n")[:-1]
    assert len(texts) == 3 and all(text.startswith("To be\nor") and text.count("\n") == 2 for text in texts)
    assert sample.unescape(r"a\tb\\nc\d") == "a\tb\\nc\\d"  # \\ is one backslash; other backslashes stay


@pytest.mark.parametrize("start, fragments", [
    ("FILE:", ["start='FILE:' names no file", "--start=FILE:PATH"]),
    ("FILE:/dev/null", ["prompt file '/dev/null' is a device, not a regular file"]),
    ("FILE:/dev/zero", ["prompt file '/dev/zero' is a device, not a regular file"]),
])
def test_a_prompt_file_that_is_no_file_is_one_line(run_copy, capsys, start, fragments):
    """Were "prompt file '' is a folder" and "'/dev/null' does not exist"."""
    started = time.perf_counter()
    result = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", f"--start={start}"], capsys)
    assert_one_line_error(*result, *fragments)
    assert time.perf_counter() - started < 10  # /dev/zero is not read


def test_a_prompt_whose_characters_the_tokenizers_pattern_drops_is_one_line():
    """Was: a pattern edited to '[a-z]+' encoded 'hello, World!' as 'helloorld', and the model continued that."""
    from helpers import tiny_model

    from errors import UserError
    from text.tokenizer import GPT2_PATTERN, BPETokenizer

    model = tiny_model("learned", vocab_size=257)
    config = sample.SampleConfig(start="hello, World!", max_new_tokens=2, num_samples=1)
    whole = BPETokenizer([bytes([i]) for i in range(256)], GPT2_PATTERN)
    assert sample.sample(model, whole, config)[0].startswith("hello, World!")
    edited = BPETokenizer([bytes([i]) for i in range(256)], "[a-z]+")
    assert edited.decode(edited.encode("hello, World!")) == "helloorld"
    with pytest.raises(UserError, match=r"^--start='hello, World!': the tokenizer drops ' !,W' from it \(its "
                                        r"pre-tokenization pattern '\[a-z\]\+' matches none of them\)"):
        sample.sample(model, edited, config)
