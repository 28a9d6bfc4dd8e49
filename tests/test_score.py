"""score.py against the study's own evaluation of the same model on the same split, bits per byte counted by hand
from the text's bytes, and HF transformers' loss of GPT-2 weights on the same tokens."""

import errno
import io
import json
import math
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from helpers import REPO

import score
from errors import OptionError, UserError, main_guard
from model import GPT, GPTConfig
from sample import load_model
from study.config import AblateConfig
from study.evaluation import evaluate_model, forward_pieces, model_losses, token_losses
from text.bpe_train import TokenizerConfig
from text.dataset import load_split, prepare
from text.tokenizer import CharTokenizer, load_tokenizer
from train import TrainConfig, train
from training import run_dir as run_dir_module


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, char_data):
    """A baby model trained 20 steps on the corpus's characters, block_size 32."""
    out = tmp_path_factory.mktemp("score_run")
    train(TrainConfig(dataset=str(char_data), out_dir=str(out), max_iters=20, lr_decay_iters=20, eval_interval=20,
                      eval_iters=2, batch_size=4, warmup_iters=2, device="cpu", compile=False, progress=False),
          GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32))
    return out


@pytest.fixture(scope="module")
def bpe_run_dir(tmp_path_factory, corpus_text):
    """A baby model trained 4 steps on the corpus in a BPE of 300 tokens learned from it, block_size 32."""
    data = tmp_path_factory.mktemp("score_bpe_data")
    prepare(corpus_text, data, TokenizerConfig(tokenizer="bpe", vocab_size=300))
    out = tmp_path_factory.mktemp("score_bpe_run")
    train(TrainConfig(dataset=str(data), out_dir=str(out), max_iters=4, lr_decay_iters=4, eval_interval=4,
                      eval_iters=1, batch_size=4, warmup_iters=1, device="cpu", compile=False, progress=False),
          GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=32))
    return out


def protocol_settings(protocol: str) -> dict:
    """The study's settings for the protocol: a window of 32 advancing by 8 (sliding); block_size 32's windows
    (nonoverlapping, the default length)."""
    return {"window": 32, "stride": 8} if protocol == "sliding" else {}


def split_file(char_data, tmp_path) -> tuple[np.ndarray, str]:
    """The test split's tokens and a file holding its text."""
    data = load_split(char_data, "test", 32)
    text = load_tokenizer(char_data).decode(data.tolist())
    (tmp_path / "split.txt").write_text(text, encoding="utf-8")
    return data, str(tmp_path / "split.txt")


@pytest.mark.parametrize("protocol", ["nonoverlapping", "sliding"])
def test_the_score_of_a_split_is_the_studys_evaluation_of_it(run_dir, char_data, tmp_path, protocol):
    data, path = split_file(char_data, tmp_path)
    result = score.score(score.ScoreConfig(out_dir=str(run_dir), input=[path], protocol=protocol, device="cpu",
                                           **protocol_settings(protocol)))
    model = load_model("resume", str(run_dir))[0]
    # the study at L = block_size (non-overlapping), and the sliding protocol over the whole split as one window
    length = 32 if protocol == "nonoverlapping" else len(data) - 1
    study = evaluate_model(model, data, [length], AblateConfig(protocols=[protocol], sliding_window=32,
                                                               sliding_stride=8), torch.device("cpu"), torch.float32)
    assert result["tokens"] == len(data) - 1
    assert result["loss"] == pytest.approx(study[protocol][str(length)]["loss"], rel=1e-12)


@pytest.mark.parametrize("chunk_bytes", [1, 2, 1 << 20])  # 1 and 2: cut inside every 3-byte character
def test_bits_per_byte_and_each_tokens_log_probability_by_hand(run_dir, tmp_path, chunk_bytes):
    text = "Assert statements \u201cquoted\u201d \u2013 it\u2019s so.\nAnd a second line.\n"  # 3-byte characters
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    result = score.score(score.ScoreConfig(out_dir=str(run_dir), input=[str(tmp_path / "t.txt")], device="cpu",
                                           per_token=str(tmp_path / "t.jsonl"), chunk_bytes=chunk_bytes))
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [row["index"] for row in rows] == list(range(1, len(text)))  # characters: a token each, the first context
    assert "".join(row["text"] for row in rows) == text[1:]
    nats = -sum(row["logprob"] for row in rows)
    scored_bytes = len(text.encode("utf-8")) - len(text[0].encode("utf-8"))
    assert result["bytes"] == scored_bytes and result["tokens"] == len(rows)
    assert result["loss"] == pytest.approx(nats / len(rows))
    assert result["bits_per_byte"] == pytest.approx(nats / math.log(2) / scored_bytes)
    assert result["perplexity"] == pytest.approx(math.exp(nats / len(rows)))


@pytest.mark.parametrize("kind", ["char", "bpe"])
@pytest.mark.parametrize("protocol", ["nonoverlapping", "sliding"])
def test_a_text_read_in_small_chunks_scores_as_the_whole_text_does(run_dir, bpe_run_dir, corpus_text, tmp_path,
                                                                   kind, protocol):
    """12 KB in two files cut inside a word, read 1 KB at a time, against one chunk of one file: the same
    numbers, the same rows; and every token's loss is the study's token_losses of the whole text's tokens."""
    run, text = str(run_dir if kind == "char" else bpe_run_dir), corpus_text[:12000]
    middle = text.index("tion", 5000) + 2  # inside a word: a BPE token of the whole text crosses the files
    for name, part in (("whole.txt", text), ("a.txt", text[:middle]), ("b.txt", text[middle:])):
        (tmp_path / name).write_text(part, encoding="utf-8")

    def scored(names: list[str], chunk_bytes: int) -> tuple[dict, list[dict]]:
        rows = tmp_path / f"{chunk_bytes}.jsonl"
        result = score.score(score.ScoreConfig(out_dir=run, input=[str(tmp_path / name) for name in names],
                                               protocol=protocol, chunk_bytes=chunk_bytes, device="cpu",
                                               per_token=str(rows), **protocol_settings(protocol)))
        return result, [json.loads(line) for line in rows.read_text(encoding="utf-8").splitlines()]

    whole, whole_rows = scored(["whole.txt"], 1 << 20)
    assert scored(["a.txt", "b.txt"], 1024) == (whole, whole_rows)
    model, tokenizer = load_model("resume", run)
    ids = np.asarray(tokenizer.encode(text))
    losses = token_losses(model_losses(model, torch.device("cpu"), torch.float32), ids,
                          32 if protocol == "nonoverlapping" else len(ids) - 1, 32, 8, 64)
    assert [row["id"] for row in whole_rows] == ids[1:].tolist()
    assert [-row["logprob"] for row in whole_rows] == losses.tolist()  # bit for bit
    assert whole["loss"] == pytest.approx(losses.mean(), rel=1e-12)  # summed in another order


@pytest.mark.parametrize("protocol", ["nonoverlapping", "sliding"])
def test_a_text_of_20_chunks_holds_a_chunk_and_a_batch_of_tokens_at_most(run_dir, corpus_text, tmp_path,
                                                                         monkeypatch, protocol):
    chunk_bytes, batch_size, window = 1024, 16, 32
    text = corpus_text[:20 * chunk_bytes]
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    held, encoded = [], []
    batches, encode = score.scored_batches, CharTokenizer.encode

    def spy_batches(*args):
        for out in batches(*args):
            held.append(len(out[0]))
            yield out

    monkeypatch.setattr(score, "scored_batches", spy_batches)
    monkeypatch.setattr(CharTokenizer, "encode", lambda self, piece: encoded.append(len(piece)) or encode(self, piece))
    result = score.score(score.ScoreConfig(out_dir=str(run_dir), input=[str(tmp_path / "t.txt")], protocol=protocol,
                                           chunk_bytes=chunk_bytes, batch_size=batch_size, device="cpu",
                                           **{"window" if protocol == "sliding" else "length": window}))
    assert result["tokens"] == len(text) - 1 and len(encoded) >= 20
    # a piece of text is at most a chunk; held: a chunk's tokens and a batch of windows with the token after
    assert max(encoded) <= chunk_bytes and max(held) <= chunk_bytes + batch_size * window + 1 < len(text) / 10


@pytest.mark.parametrize("length, window, stride", [(sys.maxsize, 8, 3), (sys.maxsize, 8, 8), (sys.maxsize, 1, 1),
                                                    (5, 5, 5), (12, 5, 2)])
def test_pieces_streamed_as_tokens_arrive_are_the_studys_forward_pieces(length, window, stride):
    """Tokens in chunks of every size: the batches are those of one chunk, their pieces forward_pieces's, and the
    tokens held at each batch are the text's tokens those pieces read."""
    rng = np.random.default_rng(0)
    for n_targets in (0, 1, 2, 5, 8, 9, 10, 31, 100):
        data = np.arange(n_targets + 1)  # token i is i

        def batches(chunks: list[np.ndarray]) -> list[list[tuple]]:
            out = []
            for held, first, batch in score.scored_batches(chunks, length, window, stride, 3):
                assert len(batch) <= 3 and len(set(batch[:, 1])) == 1
                for start, size, _ in batch:
                    assert held[start - first:start - first + size + 1].tolist() == list(range(start, start + size + 1))
                out.append([tuple(piece) for piece in batch.tolist()])
            return out

        whole = batches([data])
        length_cut = min(length, max(n_targets, 1))  # as score.py's token_losses call cut it
        assert [piece for batch in whole for piece in batch] == forward_pieces(n_targets, length_cut, window, stride)
        for _ in range(5):
            cuts = np.sort(rng.choice(np.arange(1, n_targets + 2), size=rng.integers(0, n_targets + 2), replace=False))
            assert batches(np.split(data, cuts)) == whole


def test_the_progress_bar_is_on_a_terminals_stderr_only(run_dir, tmp_path, capsys, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    (tmp_path / "t.txt").write_text("a short text to score\n" * 20, encoding="utf-8")
    for flags, shown in (([], True), (["--progress=False"], False)):
        monkeypatch.setattr(sys, "stderr", Terminal())
        score.main([f"--out_dir={run_dir}", f"--input={tmp_path / 't.txt'}", "--device=cpu", *flags])
        out = capsys.readouterr().out
        assert ("scoring: 100%" in sys.stderr.getvalue()) == shown, sys.stderr.getvalue()
        assert len(out.splitlines()) == 2 and "scoring" not in out, out


@pytest.mark.gpt2_bpe
def test_gpt2_weights_score_as_hf_transformers_does(tmp_path):
    """A random GPT-2 in HF's format (a local folder, as --init_from takes it): its mean loss over the targets
    equals HF GPT2LMHeadModel's loss with labels, on the same GPT-2 BPE tokens."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, n_positions=64))
    hf.save_pretrained(tmp_path / "hf")
    text = "The quick brown fox jumps over the lazy dog, twice: the quick brown fox."
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    result = score.score(score.ScoreConfig(init_from=str(tmp_path / "hf"), input=[str(tmp_path / "t.txt")],
                                           protocol="nonoverlapping", device="cpu"))
    import tiktoken

    ids = torch.tensor([tiktoken.get_encoding("gpt2").encode_ordinary(text)])
    with torch.no_grad():
        expected = hf.eval()(ids, labels=ids).loss.item()
    assert result["tokens"] == ids.size(1) - 1 and result["loss"] == pytest.approx(expected, abs=1e-5)


def cli(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        main_guard(score.main, argv)
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("content, flags, message", [
    (b"", [], "is empty"),
    (b"caf\xe9 latin-1", [], "is not UTF-8 text: byte 0xe9 at offset 3"),
    (b"abcdefgh\xe9ij", ["--chunk_bytes=3"], "is not UTF-8 text: byte 0xe9 at offset 8"),  # in the third block
    (b"ab\xe2\x80x", ["--chunk_bytes=3"], "is not UTF-8 text: byte 0xe2 at offset 2"),  # begun in the block before
    (b"a text\xe2\x80", ["--chunk_bytes=2"], "is not UTF-8 text: byte 0xe2 at offset 6"),  # cut short at the end
    (b"a text", ["--chunk_bytes=0"], "chunk_bytes=0 must be at least 1"),
    ("a \u2603 text \u265e\u2603".encode(), [], "the text holds '\u2603\u265e', 3 character(s) in all, the first "
                                                "at --input "),
    (("a text " * 40 + "\u2603 " * 9 + "a text " * 40 + "\u2603").encode(), ["--chunk_bytes=16"],
     "the text holds '\u2603', 10 character(s) in all"),  # in late chunks, all counted
    (b"a text", ["--protocol=nonoverlapping", "--length=64"], "length=64 is more positions than this model's "
                                                               "encoding has (32: block_size); give --length=32"),
    (b"a text", ["--window=64"], "window=64 is longer than the model's block_size=32"),
    (b"a text", ["--window=8", "--stride=16"], "stride=16 is longer than window=8"),
    (b"a text", ["--protocol=perplexity"], "protocol='perplexity' must be one of sliding, nonoverlapping"),
    (b"a text", ["--protocol=nonoverlapping", "--window=16"], "window=16 does nothing under protocol="
                                                               "nonoverlapping (it is --protocol=sliding's); drop"),
    (b"a text", ["--protocol=nonoverlapping", "--stride=4"], "stride=4 does nothing under protocol=nonoverlapping"),
    (b"a text", ["--length=16"], "length=16 does nothing under protocol=sliding (it is --protocol=nonoverlapping's); "
                                 "drop --length, or give --protocol=nonoverlapping"),
])
def test_bad_input_is_one_line(run_dir, tmp_path, capsys, content, flags, message):
    (tmp_path / "t.txt").write_bytes(content)
    code, err = cli([f"--out_dir={run_dir}", f"--input={tmp_path / 't.txt'}", "--device=cpu", *flags], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], err


@pytest.mark.parametrize("stdin", [False, True])
def test_an_unknown_character_late_in_the_text_is_refused_before_any_forward(run_dir, corpus_text, tmp_path, capsys,
                                                                               monkeypatch, stdin):
    """Was: the chunks before the one holding it were scored first (compute spent, then exit 2). The first one
    sits in the 313th of 8-byte chunks, in a line begun in an earlier chunk; its line and column are counted here
    from the text."""
    head = corpus_text[:2500]
    text = head + "\u2603" + corpus_text[2500:3000] + "\u265e\n"
    line, column = head.count("\n") + 1, len(head) - head.rfind("\n")
    assert len(head.encode()) == 2500 and column > 8 and not {"\u2603", "\u265e"} & set(corpus_text)
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    forwards, forward = [], GPT.forward
    monkeypatch.setattr(GPT, "forward", lambda *args, **kwargs: forwards.append(1) or forward(*args, **kwargs))
    if stdin:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    source = "standard input" if stdin else f"--input {str(tmp_path / 't.txt')!r}"
    code, err = cli([f"--out_dir={run_dir}", f"--input={'-' if stdin else tmp_path / 't.txt'}", "--device=cpu",
                     "--chunk_bytes=8", "--window=8", "--stride=1"], capsys)
    assert code == 2 and not forwards, err
    assert err.splitlines() == [f"error: the text holds '\u2603\u265e', 2 character(s) in all, the first at {source}, "
                                f"line {line}, column {column}, which the model's {len(set(corpus_text))}-character "
                                "vocabulary does not have; dropping them would change the score, so nothing is "
                                "scored: remove or replace them in the text, or score a model trained on data with "
                                "them"]


def test_standard_input_scores_as_the_file_does(run_dir, corpus_text, tmp_path, monkeypatch):
    """Standard input is read twice (checked, then scored) through a temporary file: the same numbers, the same
    rows as the file's, its Windows line ends newlines both times, and the temporary file gone after."""
    text = corpus_text[:3000]
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.replace("\n", "\r\n").encode())))
    monkeypatch.setattr(score.tempfile, "tempdir", str(tmp_path / "spool"))
    (tmp_path / "spool").mkdir()
    settings = dict(out_dir=str(run_dir), device="cpu", chunk_bytes=256)
    results = [score.score(score.ScoreConfig(**settings, input=[name], per_token=str(tmp_path / f"{i}.jsonl")))
               for i, name in enumerate((str(tmp_path / "t.txt"), "-"))]
    assert results[0] == results[1] and results[0]["tokens"] == len(text) - 1
    assert (tmp_path / "0.jsonl").read_text() == (tmp_path / "1.jsonl").read_text()
    assert not list((tmp_path / "spool").iterdir())


def test_a_full_disk_under_standard_inputs_temporary_file_is_one_line(run_dir, tmp_path, capsys, monkeypatch):
    class FullDisk(io.BytesIO):
        name = str(tmp_path / "score-x" / "stdin0.txt")

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a text to score")))
    monkeypatch.setattr(score, "open", lambda *args: FullDisk(), raising=False)
    code, err = cli([f"--out_dir={run_dir}", "--input=-", "--device=cpu"], capsys)
    assert code == 2 and err.splitlines() == [
        f"error: standard input cannot be kept in a temporary file in {tmp_path} while it is checked: No space left "
        "on device; set TMPDIR to a folder with room, or give the text as a file (--input=FILE)"], err


def test_no_input_or_a_text_of_one_token_is_refused(run_dir, tmp_path):
    with pytest.raises(OptionError, match="no --input"):
        score.score(score.ScoreConfig(out_dir=str(run_dir)))
    (tmp_path / "one.txt").write_text("a", encoding="utf-8")
    with pytest.raises(UserError, match="needs at least 2"):
        score.score(score.ScoreConfig(out_dir=str(run_dir), input=[str(tmp_path / "one.txt")], device="cpu"))


def test_sigterm_while_writing_per_token_is_one_line_143_and_leaves_no_temp_file(run_dir, corpus_text, tmp_path,
                                                                                 script_env):
    """Was: exit 143 by the default action, nothing on stderr, tokens.jsonl<random>.tmp left behind. A stride of 1
    makes a piece per token: scoring takes minutes, and is stopped once the temp file has begun to fill."""
    (tmp_path / "big.txt").write_text(corpus_text * 20, encoding="utf-8")
    process = subprocess.Popen([sys.executable, str(REPO / "score.py"), f"--out_dir={run_dir}", "--device=cpu",
                                f"--input={tmp_path / 'big.txt'}", f"--per_token={tmp_path / 'tokens.jsonl'}",
                                "--window=32", "--stride=1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=script_env)
    try:
        deadline = time.monotonic() + 120
        while not any(temp.stat().st_size for temp in tmp_path.glob("tokens.jsonl*.tmp")):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no token written after 120 s"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)  # within seconds, not at the end of the text
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 143, err
    assert err.strip().splitlines() == [f"interrupted (SIGTERM): nothing scored; --per_token "
                                        f"{str(tmp_path / 'tokens.jsonl')!r} is as it was"], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt"]


@pytest.mark.parametrize("chunk_bytes", [1, 5, 1 << 20])  # 1: every \r\n cut between two blocks
def test_windows_line_ends_score_as_newlines_as_prepare_reads_them(run_dir, corpus_text, tmp_path, capsys,
                                                                   chunk_bytes):
    """Was: refused, '\\r' not in the model's characters, where prepare.py reads the same file as newlines
    (tests/test_prepare_faults.py). \\r\\n and a lone \\r (an old Mac's line end, here at the end of a file) are \\n."""
    text = corpus_text[:3000]
    assert "\r" not in text and text.count("\n") > 50
    (tmp_path / "unix.txt").write_text(text + "\n", encoding="utf-8")
    (tmp_path / "windows.txt").write_bytes((text.replace("\n", "\r\n") + "\r").encode("utf-8"))
    results = [score.score(score.ScoreConfig(out_dir=str(run_dir), input=[str(tmp_path / f"{name}.txt")],
                                             per_token=str(tmp_path / f"{name}.jsonl"), chunk_bytes=chunk_bytes,
                                             device="cpu")) for name in ("unix", "windows")]
    assert results[0] == results[1]
    assert (tmp_path / "unix.jsonl").read_text() == (tmp_path / "windows.jsonl").read_text()
    assert capsys.readouterr().err.strip() == (f"note: --input {str(tmp_path / 'windows.txt')!r} holds "
                                               f"{text.count(chr(10)) + 1} carriage returns (Windows line ends): "
                                               "read as newlines, as prepare.py reads a text")


def test_a_per_token_file_already_there_is_kept_unless_overwrite_is_given(run_dir, corpus_text, tmp_path):
    (tmp_path / "a.txt").write_text(corpus_text[:2000], encoding="utf-8")
    rows = tmp_path / "tokens.jsonl"
    rows.write_text("mine\n", encoding="utf-8")
    settings = dict(out_dir=str(run_dir), input=[str(tmp_path / "a.txt")], device="cpu", per_token=str(rows))
    with pytest.raises(UserError, match=r"tokens.jsonl' is already there .*--per_token_overwrite=True"):
        score.score(score.ScoreConfig(**settings))
    assert rows.read_text(encoding="utf-8") == "mine\n"
    score.score(score.ScoreConfig(**settings, per_token_overwrite=True))
    assert json.loads(rows.read_text(encoding="utf-8").splitlines()[0])["index"] == 1
    with pytest.raises(ValueError, match="per_token_overwrite=True does nothing without --per_token"):
        score.ScoreConfig(per_token_overwrite=True)


def test_a_per_token_folder_is_refused_before_the_model_is_loaded(run_dir, tmp_path, monkeypatch):
    """Was: the whole text scored (34 s for 215 KB), then "could not write ...: Is a directory"; and without
    --per_token_overwrite, "already there ... give --per_token_overwrite=True", a fix that could not work."""
    (tmp_path / "a.txt").write_text("hello world\n", encoding="utf-8")
    monkeypatch.setattr(score, "load_model", lambda *args: pytest.fail("the model was loaded"))
    for overwrite in (False, True):
        with pytest.raises(UserError) as refused:
            score.score(score.ScoreConfig(out_dir=str(run_dir), input=[str(tmp_path / "a.txt")], device="cpu",
                                          per_token=str(tmp_path), per_token_overwrite=overwrite))
        assert str(refused.value) == (f"--per_token {str(tmp_path)!r} is a folder; give the file to write, e.g. "
                                      f"--per_token={tmp_path / 'tokens.jsonl'}")


def test_a_second_signal_aborts_saying_what_scoring_leaves(monkeypatch, capsys):
    """Was: score.py's second Ctrl-C said "the checkpoints are the last ones saved whole", train.py's words."""
    def exit_now(code):
        raise SystemExit(code)

    def signalled_twice(config, poll):  # the first while scoring, the second while its files are put back
        try:
            signal.raise_signal(signal.SIGTERM)
        except run_dir_module.Interrupted:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(run_dir_module.os, "_exit", exit_now)
    monkeypatch.setattr(score, "score_text", signalled_twice)
    with pytest.raises(SystemExit) as aborted:
        score.score(score.ScoreConfig(per_token="t.jsonl"))
    assert aborted.value.code == 130
    assert capsys.readouterr().err == "aborted by a second SIGINT: nothing scored; --per_token 't.jsonl' is as it was\n"
