"""sample.py: prompts, the sampler function, and the command line end to end on a freshly trained checkpoint."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from errors import OptionError, UserError
from gpt.gpt2_weights import export_hf
from model import GPT, GPTConfig
from sample import SampleConfig, encode_prompt, load_model, sample
from text.dataset import prepare
from text.tokenizer import CharTokenizer, GPT2Tokenizer
from train import TrainConfig, train

REPO = Path(__file__).resolve().parents[1]
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 40


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A tiny character model trained for a few steps: a real checkpoint to sample from."""
    root = tmp_path_factory.mktemp("run")
    prepare(TEXT, root / "data", "char")
    config = TrainConfig(out_dir=str(root / "out"), dataset=str(root / "data"), max_iters=20, eval_interval=10,
                         eval_iters=2, batch_size=4, device="cpu", compile=False, progress=False, warmup_iters=2,
                         lr_decay_iters=20)
    train(config, GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16))
    return root / "out"


def test_a_prompt_the_model_cannot_read_names_the_flag_and_the_fix():
    """The default --start='\\n', for a model of a text without newlines, said only which characters it knows."""
    tokenizer = CharTokenizer.from_text("abc def")
    with pytest.raises(UserError, match=r"--start='\\n': characters not in the 7-character vocabulary: '\\n'.*"
                                        r"--start='' to start from the model's own first token"):
        encode_prompt(tokenizer, "\n", 8)
    assert encode_prompt(tokenizer, "", 8) == [0]  # ' ', the first of its sorted characters


def test_a_prompt_with_characters_the_model_lacks_drops_them_and_says_which(capsys):
    """Was: refused as a whole for one character, though the rest is a prompt the model reads."""
    tokenizer = CharTokenizer.from_text("abc def")
    assert encode_prompt(tokenizer, "a\u00e9b?c \u00e9d", 16) == tokenizer.encode("abc d")
    assert capsys.readouterr().err.splitlines() == [
        "note: 3 character(s) of the prompt dropped, '?\u00e9': the model's 7-character vocabulary does not have them"]


def test_prompt_from_text_file_and_empty():
    tokenizer = CharTokenizer.from_text("ab\nc")
    assert encode_prompt(tokenizer, "", 8) == [tokenizer.chars.index("\n")]
    assert encode_prompt(tokenizer, "cab", 8) == [tokenizer.chars.index(c) for c in "cab"]


def test_prompt_from_file(tmp_path):
    tokenizer = CharTokenizer.from_text("abc")
    (tmp_path / "prompt.txt").write_text("bca", encoding="utf-8")
    assert tokenizer.decode(encode_prompt(tokenizer, f"FILE:{tmp_path / 'prompt.txt'}", 8)) == "bca"


@pytest.mark.gpt2_bpe
def test_empty_prompt_starts_from_end_of_text_with_bpe():
    assert encode_prompt(GPT2Tokenizer(), "", 8) == [50256]


def test_long_prompt_is_cropped_with_a_warning(capsys):
    tokenizer = CharTokenizer.from_text("abcdefghij")
    assert tokenizer.decode(encode_prompt(tokenizer, "abcdefghij", 4)) == "ghij"
    assert "keeping its last block_size=4" in capsys.readouterr().err


def test_a_prompt_of_unknown_characters_only_is_refused_naming_them():
    """Dropped, they would leave no prompt (the case of some is in the test above)."""
    with pytest.raises(ValueError, match="'xz'"):
        encode_prompt(CharTokenizer.from_text("abc"), "xzx", 8)


@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_cached_and_uncached_samples_agree_across_the_window(trained_run, compile):
    model, tokenizer = load_model("resume", str(trained_run))
    assert model.config.block_size == 16
    for slide in (None, 1):
        config = SampleConfig(start="All:", num_samples=2, max_new_tokens=48, temperature=1.0, top_k=5, top_p=0.9,
                              slide=slide, seed=3, compile=compile)
        cached = sample(model, tokenizer, config)
        uncached = sample(model, tokenizer, SampleConfig(**{**config.__dict__, "no_cache": True, "compile": False}))
        assert cached == uncached
        assert all(s.startswith("All:") and len(s) == 4 + 48 for s in cached)


def test_each_sample_comes_out_the_same_alone(trained_run):
    model, tokenizer = load_model("resume", str(trained_run))
    config = SampleConfig(start="All:", num_samples=3, max_new_tokens=40, temperature=1.0, seed=7)
    together = sample(model, tokenizer, config)
    assert len(set(together)) == 3
    for i, text in enumerate(together):
        assert sample(model, tokenizer, SampleConfig(**{**config.__dict__, "num_samples": 1, "seed": 7 + i})) == [text]


def test_streamed_text_is_the_first_sample(trained_run):
    model, tokenizer = load_model("resume", str(trained_run))
    pieces = []
    samples = sample(model, tokenizer, SampleConfig(start="Speak", num_samples=2, max_new_tokens=20),
                     on_text=pieces.append)
    assert "".join(pieces) == samples[0]
    assert len(pieces) == 1 + 20  # the prompt, then one piece per character token


@pytest.mark.slow
def test_cli_compiled_decoding_prints_the_same_samples(trained_run, script_env):
    def run(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "sample.py", f"--out_dir={trained_run}", "--start=All", "--seed=5",
                               "--max_new_tokens=40", "--device=cpu", "--stream", *flags], cwd=REPO,
                              capture_output=True, text=True, timeout=300, env=script_env)

    eager, compiled = run(), run("--compile")
    assert compiled.returncode == 0, compiled.stderr
    assert compiled.stdout == eager.stdout and compiled.stdout.startswith("All")
    assert "compiled decode step: its compilation included" in compiled.stderr


@pytest.mark.gpt2_bpe
def test_stream_sends_the_text_still_pending_at_the_end(monkeypatch):
    """A BPE sample that ends inside a multi-byte character: the stream waits for the rest, which never comes;
    what is pending must still be sent, so that the stream equals the sample."""
    tokenizer = GPT2Tokenizer()
    partial = [tokenizer.encoding.encode_single_token(byte) for byte in (b"\xe2", b"\x82")]  # 2 of the 3 of €

    class Fixed(torch.nn.Module):  # a model that always says those two tokens
        config = GPTConfig(block_size=8, vocab_size=50257, n_layer=1, n_head=1, n_embd=4)

        def parameters(self):
            yield torch.zeros(1)

        def generate_stream(self, idx, max_new_tokens, *args, **kwargs):
            for token in partial:
                yield torch.tensor([[token]] * idx.size(0))

    monkeypatch.setattr("sample.generate_stream", lambda model, *args, **kwargs: model.generate_stream(*args, **kwargs))
    pieces = []
    texts = sample(Fixed(), tokenizer, SampleConfig(start="A", num_samples=1, max_new_tokens=2), on_text=pieces.append)
    assert texts[0] == tokenizer.decode(tokenizer.encode("A") + partial) and texts[0].endswith("\ufffd")
    assert "".join(pieces) == texts[0]


def test_cli_end_to_end(trained_run):
    def run(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "sample.py", f"--out_dir={trained_run}", "--start=First",
                               "--num_samples=2", "--max_new_tokens=30", "--seed=7", "--device=cpu", *flags],
                              cwd=REPO, capture_output=True, text=True, timeout=120)

    cached, uncached = run(), run("--no_cache")
    assert cached.returncode == 0, cached.stderr
    samples = [s.strip("\n") for s in cached.stdout.split("---------------") if s.strip()]
    assert len(samples) == 2
    alphabet = set(TEXT)
    assert all(s.startswith("First") and set(s) <= alphabet for s in samples)
    assert uncached.stdout == cached.stdout
    assert "tokens/s (KV cache)" in cached.stderr and "tokens/s (no cache)" in uncached.stderr


def test_cli_bad_input_is_a_clear_error(trained_run, tmp_path):
    unknown = subprocess.run([sys.executable, "sample.py", f"--out_dir={trained_run}", "--start=~~~"], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2 and "'~'" in unknown.stderr and "Traceback" not in unknown.stderr
    missing = subprocess.run([sys.executable, "sample.py", f"--out_dir={tmp_path}"], cwd=REPO, capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 2 and "holds no run" in missing.stderr


@pytest.mark.gpt2_bpe
def test_sample_from_local_hugging_face_directory(tmp_path):
    torch.manual_seed(0)
    export_hf(GPT(GPTConfig(vocab_size=50257, block_size=32, n_layer=1, n_head=2, n_embd=8)), tmp_path / "hf")
    model, tokenizer = load_model(str(tmp_path / "hf"), "unused")
    text = sample(model, tokenizer, SampleConfig(start="Hello", num_samples=1, max_new_tokens=5, temperature=0))[0]
    from transformers import GPT2LMHeadModel

    reference = GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()  # transformers' own greedy decoding
    expected = reference.generate(torch.tensor([tokenizer.encode("Hello")]), max_new_tokens=5, do_sample=False,
                                  min_new_tokens=5, pad_token_id=50256, eos_token_id=None)[0].tolist()
    assert len(expected) == 1 + 5
    assert text == tokenizer.decode(expected)


def test_sample_config_rejects_bad_values():
    with pytest.raises(ValueError, match="num_samples=0"):
        SampleConfig(num_samples=0)
    with pytest.raises(OptionError, match="top_p"):
        from options import parse_options

        parse_options(["--top_p=abc"], (SampleConfig,), "sample.py", "")


def test_gpt2_by_name_offline_fails_fast_with_a_local_path_hint(script_env):
    """No network here (and script_env routes HTTP to a closed port): a clear message within seconds."""
    result = subprocess.run([sys.executable, "sample.py", "--init_from=gpt2"], cwd=REPO, capture_output=True,
                            text=True, timeout=60, env=script_env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "could not download 'gpt2'" in result.stderr and "local directory" in result.stderr


def first_occurrence_cut(text: str, prompt: str, stops: list[str], keep: bool = False) -> str:
    """The reference: the prompt, then the generated text up to its first stop (Python's str.find)."""
    generated = text[len(prompt):]
    found = [(generated.find(s), len(s)) for s in stops if generated.find(s) >= 0]
    if not found:
        return text
    at, length = min(found)
    return prompt + generated[:at + length * keep]


@pytest.mark.parametrize("keep", [False, True])
def test_stop_strings_cut_every_sample_at_its_first_stop(trained_run, keep):
    model, tokenizer = load_model("resume", str(trained_run))
    config = SampleConfig(start="All:", num_samples=3, max_new_tokens=60, temperature=1.0, seed=11)
    whole = sample(model, tokenizer, config)
    generated = whole[0][4:]
    stop = generated[20:22]  # two characters: two tokens
    assert len(stop) == 2
    pieces = []
    stopped = sample(model, tokenizer, SampleConfig(**{**config.__dict__, "stop": [stop, "zz"], "keep_stop": keep}),
                     on_text=pieces.append)
    assert stopped == [first_occurrence_cut(text, "All:", [stop, "zz"], keep) for text in whole]
    assert len(stopped[0]) <= 4 + 22 and "".join(pieces) == stopped[0]  # the stream shows nothing past it


def test_cli_streams_up_to_the_stop_only(trained_run, capsys):
    from errors import main_guard
    from sample import main

    def run(*flags):
        main_guard(main, [f"--out_dir={trained_run}", "--device=cpu", "--start=All:", "--num_samples=1",
                          "--max_new_tokens=60", "--seed=3", "--stream", *flags])
        return capsys.readouterr().out.split("\n---------------")[0]

    whole = run()
    stop = whole[4:][25:27]
    assert run(f"--stop={stop}") == first_occurrence_cut(whole, "All:", [stop])


def test_stop_is_repeatable_and_each_flag_is_taken_whole():
    from options import parse_options

    (config,) = parse_options(["--stop=a,b", "--stop=\n\n", "--stop= c"], (SampleConfig,), "sample.py", "")
    assert config.stop == ["a,b", "\n\n", " c"]
    assert SampleConfig().stop == [] and SampleConfig().end_of_text_stops


class Fixed(torch.nn.Module):
    """A GPT-2-vocabulary model that always says the same tokens, one row or many."""
    config = GPTConfig(block_size=8, vocab_size=50257, n_layer=1, n_head=1, n_embd=4)

    def __init__(self, tokens: list[int]):
        super().__init__()
        self.tokens = tokens

    def parameters(self):
        yield torch.zeros(1)

    def generate_stream(self, idx, max_new_tokens, *args, **kwargs):
        for token in self.tokens[:max_new_tokens]:
            yield torch.tensor([[token]] * idx.size(0))


@pytest.mark.gpt2_bpe
@pytest.mark.parametrize("end_of_text_stops", [True, False])
def test_end_of_text_ends_a_bpe_sample_by_default(monkeypatch, end_of_text_stops):
    tokenizer = GPT2Tokenizer()
    tokens = tokenizer.encode(" there") + [tokenizer.eot_token] + tokenizer.encode("Next document")
    monkeypatch.setattr("sample.generate_stream", lambda model, *args, **kwargs: model.generate_stream(*args, **kwargs))
    config = SampleConfig(start="Hi", num_samples=2, max_new_tokens=len(tokens), end_of_text_stops=end_of_text_stops)
    texts = sample(Fixed(tokens), tokenizer, config)
    expected = "Hi there" if end_of_text_stops else "Hi there<|endoftext|>Next document"
    assert texts == [expected, expected]


@pytest.mark.gpt2_bpe
def test_tokens_per_second_counts_the_tokens_generated_before_every_sample_stopped(monkeypatch):
    from sample import sample_and_count

    tokenizer = GPT2Tokenizer()
    tokens = tokenizer.encode(" a b") + [tokenizer.eot_token] + tokenizer.encode(" c d e f g")
    monkeypatch.setattr("sample.generate_stream", lambda model, *args, **kwargs: model.generate_stream(*args, **kwargs))
    texts, steps = sample_and_count(Fixed(tokens), tokenizer, SampleConfig(start="Hi", num_samples=2,
                                                                          max_new_tokens=len(tokens)))
    assert texts == ["Hi a b"] * 2 and steps == len(tokenizer.encode(" a b")) + 1  # the stop token, then no more
