"""score.py against the study's own evaluation of the same model on the same split, bits per byte counted by hand
from the text's bytes, and HF transformers' loss of GPT-2 weights on the same tokens."""

import json
import math

import numpy as np
import pytest
import torch

import score
from errors import OptionError, UserError, main_guard
from gpt.model import GPTConfig
from sample import load_model
from study.config import AblateConfig
from study.evaluation import evaluate_model
from text.dataset import load_split
from text.tokenizer import load_tokenizer
from train import TrainConfig, train


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, char_data):
    """A baby model trained 20 steps on the corpus's characters, block_size 32."""
    out = tmp_path_factory.mktemp("score_run")
    train(TrainConfig(dataset=str(char_data), out_dir=str(out), max_iters=20, lr_decay_iters=20, eval_interval=20,
                      eval_iters=2, batch_size=4, warmup_iters=2, device="cpu", compile=False, progress=False),
          GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32))
    return out


def split_file(char_data, tmp_path) -> tuple[np.ndarray, str]:
    """The test split's tokens and a file holding its text."""
    data = load_split(char_data, "test", 32)
    text = load_tokenizer(char_data).decode(data.tolist())
    (tmp_path / "split.txt").write_text(text, encoding="utf-8")
    return data, str(tmp_path / "split.txt")


@pytest.mark.parametrize("protocol", ["nonoverlapping", "sliding"])
def test_the_score_of_a_split_is_the_studys_evaluation_of_it(run_dir, char_data, tmp_path, protocol):
    data, path = split_file(char_data, tmp_path)
    result = score.score(score.ScoreConfig(out_dir=str(run_dir), input=[path], protocol=protocol, window=32,
                                           stride=8, device="cpu"))
    model = load_model("resume", str(run_dir))[0]
    # the study at L = block_size (non-overlapping), and the sliding protocol over the whole split as one window
    length = 32 if protocol == "nonoverlapping" else len(data) - 1
    study = evaluate_model(model, data, [length], AblateConfig(protocols=[protocol], sliding_window=32,
                                                               sliding_stride=8), torch.device("cpu"), torch.float32)
    assert result["tokens"] == len(data) - 1
    assert result["loss"] == pytest.approx(study[protocol][str(length)]["loss"], rel=1e-12)


def test_bits_per_byte_and_each_tokens_log_probability_by_hand(run_dir, tmp_path):
    text = "Assert statements \u201cquoted\u201d \u2013 it\u2019s so.\nAnd a second line.\n"  # 3-byte characters
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    result = score.score(score.ScoreConfig(out_dir=str(run_dir), input=[str(tmp_path / "t.txt")], device="cpu",
                                           per_token=str(tmp_path / "t.jsonl")))
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [row["index"] for row in rows] == list(range(1, len(text)))  # characters: a token each, the first context
    assert "".join(row["text"] for row in rows) == text[1:]
    nats = -sum(row["logprob"] for row in rows)
    scored_bytes = len(text.encode("utf-8")) - len(text[0].encode("utf-8"))
    assert result["bytes"] == scored_bytes and result["tokens"] == len(rows)
    assert result["loss"] == pytest.approx(nats / len(rows))
    assert result["bits_per_byte"] == pytest.approx(nats / math.log(2) / scored_bytes)
    assert result["perplexity"] == pytest.approx(math.exp(nats / len(rows)))


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
    (b"a text", ["--protocol=nonoverlapping", "--length=64"], "length=64 is more positions than this model's "
                                                               "encoding has (32: block_size); give --length=32"),
    (b"a text", ["--window=64"], "window=64 is longer than the model's block_size=32"),
    (b"a text", ["--window=8", "--stride=16"], "stride=16 is longer than window=8"),
    (b"a text", ["--protocol=perplexity"], "protocol='perplexity' must be one of sliding, nonoverlapping"),
])
def test_bad_input_is_one_line(run_dir, tmp_path, capsys, content, flags, message):
    (tmp_path / "t.txt").write_bytes(content)
    code, err = cli([f"--out_dir={run_dir}", f"--input={tmp_path / 't.txt'}", "--device=cpu", *flags], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], err


def test_no_input_or_a_text_of_one_token_is_refused(run_dir, tmp_path):
    with pytest.raises(OptionError, match="no --input"):
        score.score(score.ScoreConfig(out_dir=str(run_dir)))
    (tmp_path / "one.txt").write_text("a", encoding="utf-8")
    with pytest.raises(UserError, match="needs at least 2"):
        score.score(score.ScoreConfig(out_dir=str(run_dir), input=[str(tmp_path / "one.txt")], device="cpu"))
