"""Issue 44's sampling options: min-p, the repetition, frequency and presence penalties over the whole sequence or
its last N tokens, and the log-probabilities of each token drawn. Each is checked against NumPy written here from
its definition; the repetition penalty and min-p also against HF transformers' own processors; at their neutral
values they leave the samples as they were; their mistakes are one line.
"""

import json
import string
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import BLOCK, VOCAB, assert_one_line_error, cli, random_ids, tiny_model

import sample
from errors import UserError
from gpt import generate as G
from layers.positions import POS_ENCODINGS
from sample import SampleConfig
from text.tokenizer import CharTokenizer

CHARS = string.ascii_lowercase + string.digits + " "  # VOCAB characters: the tiny model's vocabulary as text
assert len(CHARS) == VOCAB


def random_logits(rows: int = 4, vocab: int = 50, seed: int = 0, scale: float = 3.0) -> torch.Tensor:
    return scale * torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed))


# ---- the references, from the definitions ---------------------------------------------------------------------


def numpy_min_p_keeps(logits: np.ndarray, min_p: float) -> np.ndarray:
    """min-p (Nguyen et al. 2024): a token stays where its probability is at least min_p times the top one's."""
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    return probs >= min_p * probs.max(axis=-1, keepdims=True)


def numpy_penalize(logits: np.ndarray, history: np.ndarray, repetition: float, frequency: float,
                   presence: float) -> np.ndarray:
    """The penalties token by token: CTRL's for each id present (divide a positive logit, multiply a negative one),
    then OpenAI's logit[t] -= count[t] * frequency + (count[t] > 0) * presence."""
    out = logits.astype(np.float64).copy()
    for row, tokens in enumerate(history):
        for token in set(tokens.tolist()):
            count = int((tokens == token).sum())
            value = out[row, token]
            value = value / repetition if value > 0 else value * repetition
            out[row, token] = value - count * frequency - presence
    return out


def numpy_log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


# ---- min-p --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("min_p", [0.02, 0.1, 0.5, 1.0])
def test_min_p_keeps_what_its_definition_and_hf_keep(min_p):
    from transformers import MinPLogitsWarper, TemperatureLogitsWarper, TopKLogitsWarper

    logits = random_logits()
    filtered = G.filter_logits(logits, min_p=min_p)
    kept = torch.isfinite(filtered)
    assert np.array_equal(kept.numpy(), numpy_min_p_keeps(logits.double().numpy(), min_p))
    assert torch.equal(filtered[kept], logits[kept])  # the kept logits are untouched
    assert kept.sum(dim=-1).min() >= 1 and kept.sum() < kept.numel()  # never empty, and it did drop tokens
    assert torch.equal(filtered, MinPLogitsWarper(min_p)(None, logits))
    # in HF's order after temperature and top-k: what sample_next_token draws from
    ours = G.filter_logits(logits / 0.7, top_k=20, min_p=min_p)
    hf = MinPLogitsWarper(min_p)(None, TopKLogitsWarper(20)(None, TemperatureLogitsWarper(0.7)(None, logits)))
    assert torch.equal(ours, hf)


def test_min_p_draws_only_kept_tokens_in_their_proportions():
    logits = torch.tensor([[2.0, 1.5, 0.0, -1.0, -3.0]])
    gen = torch.Generator().manual_seed(0)
    draws = torch.cat([G.sample_next_token(logits.expand(1000, -1), 1.0, generator=gen, min_p=0.2)
                       for _ in range(20)])[:, 0]
    keep = numpy_min_p_keeps(logits.double().numpy(), 0.2)[0]  # ids 0 and 1
    assert set(draws.tolist()) == set(np.flatnonzero(keep).tolist())
    share = (draws == 0).double().mean().item()
    assert abs(share - 1 / (1 + np.exp(-0.5))) < 0.02  # p0 / (p0 + p1) over 20,000 draws: 4 standard errors


# ---- the penalties ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("repetition, frequency, presence", [
    (1.3, 0.0, 0.0), (0.7, 0.0, 0.0), (1.0, 0.4, 0.0), (1.0, 0.0, 0.9), (1.0, -0.3, 0.2), (1.5, 0.25, 0.5)])
def test_penalties_equal_their_definitions(repetition, frequency, presence):
    logits = random_logits(rows=3, vocab=20, seed=1)
    history = random_ids(3, 30, vocab=12, seed=2)  # ids 12..19 never occur: untouched
    counts, _ = G.start_counts(history, 20)
    ours = G.penalize(logits, counts, repetition, frequency, presence)
    expected = numpy_penalize(logits.numpy(), history.numpy(), repetition, frequency, presence)
    assert np.allclose(ours.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(ours[:, 12:], logits[:, 12:])


@pytest.mark.parametrize("penalty", [1.3, 0.6])
def test_repetition_penalty_equals_hf(penalty):
    from transformers import RepetitionPenaltyLogitsProcessor

    logits = random_logits(rows=3, vocab=40, seed=3)
    history = random_ids(3, 25, vocab=40, seed=4)
    ours = G.penalize(logits, G.start_counts(history, 40)[0], repetition_penalty=penalty)
    assert torch.equal(ours, RepetitionPenaltyLogitsProcessor(penalty)(history, logits.clone()))


def test_penalties_at_their_limits_keep_the_float32_logits_finite():
    """Was: --presence_penalty=-1e308 or --repetition_penalty=1e-300, finite in float64, made the float32 logits inf
    or nan and every token id 0. At PENALTY_LIMIT, logits of +-1e6 and a count of 2**32: finite, and the formula's
    float64 value to float32's precision; past it, refused."""
    limit = G.PENALTY_LIMIT
    logits = torch.tensor([[1e6, -1e6, 3.0, -2.0, 0.5]])
    counts = torch.tensor([[2**32, 1, 7, 1, 0]])
    present = (counts > 0).double().numpy()
    for repetition, frequency, presence in [(limit, 0.0, 0.0), (1 / limit, 0.0, 0.0), (1.0, limit, limit),
                                            (1.0, -limit, -limit), (limit, -limit, limit)]:
        ours = G.penalize(logits, counts, repetition, frequency, presence)
        x = logits.double().numpy()
        x = np.where(present > 0, np.where(x < 0, x * repetition, x / repetition), x)
        expected = x - counts.double().numpy() * frequency - present * presence
        assert torch.isfinite(ours).all(), (repetition, frequency, presence)
        assert np.allclose(ours.double().numpy(), expected, rtol=1e-6, atol=0)
    assert not torch.isfinite(G.penalize(logits, counts, presence_penalty=-1e308)).all()  # what check_penalties stops
    for kw in (dict(presence_penalty=-1e308), dict(frequency_penalty=limit * 1.01),
               dict(repetition_penalty=1e-300), dict(repetition_penalty=limit * 1.01)):
        with pytest.raises(ValueError, match="would overflow the float32 logits"):
            G.generate(tiny_model("learned"), random_ids(1, 4), 2, **kw)


def test_counts_slide_over_the_last_n_tokens():
    tokens = random_ids(2, 40, vocab=9, seed=5)
    for last_n in (0, 1, 6):
        counts, window = G.start_counts(tokens[:, :10], 9, last_n)
        for end in range(10, 40):
            seen = tokens[:, :end] if last_n == 0 else tokens[:, max(0, end - last_n):end]
            expected = np.stack([np.bincount(row, minlength=9) for row in seen.numpy()])
            assert np.array_equal(counts.numpy(), expected), (last_n, end)
            G.count_token(counts, window, tokens[:, end:end + 1])


def greedy_reference(model, prompt: torch.Tensor, new: int, repetition: float, frequency: float, presence: float,
                     last_n: int) -> list[int]:
    """Greedy decoding from the uncached forward with the penalties in NumPy over the prompt and the generated
    tokens (their last last_n), window slides included: the model sees its last tokens, the penalties count all."""
    sequence = prompt[0].tolist()
    context = sequence[-BLOCK:]
    for _ in range(new):
        logits = model(torch.tensor([context]))[0][:, -1].double().numpy()
        seen = np.array([sequence if last_n == 0 else sequence[-last_n:]])
        token = int(numpy_penalize(logits, seen, repetition, frequency, presence).argmax())
        sequence.append(token)
        context = (context[BLOCK // 2:] if len(context) == BLOCK else context) + [token]  # the default slide
    return sequence


@torch.no_grad()
def test_greedy_decoding_with_penalties_follows_the_reference_across_slides():
    """The penalties count the prompt and the generated text (or their last N tokens), not the model's window."""
    model = tiny_model("rope")
    prompt = random_ids(1, 5, seed=6)
    new = 2 * BLOCK
    runs = {}
    for last_n in (0, 4):
        kw = dict(repetition=1.4, frequency=0.3, presence=0.5, last_n=last_n)
        ours = G.generate(model, prompt, new, temperature=0, repetition_penalty=kw["repetition"],
                          frequency_penalty=kw["frequency"], presence_penalty=kw["presence"], penalty_last_n=last_n)
        runs[last_n] = ours[0].tolist()
        assert runs[last_n] == greedy_reference(model, prompt, new, **kw), last_n
    plain = G.generate(model, prompt, new, temperature=0)[0].tolist()
    assert len({tuple(plain), tuple(runs[0]), tuple(runs[4])}) == 3  # each setting changed the tokens


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@torch.no_grad()
def test_cached_sampling_with_every_option_equals_uncached(pos_encoding):
    model = tiny_model(pos_encoding)
    prompt = random_ids(2, 6, seed=7)
    options = dict(temperature=0.9, top_k=20, top_p=0.95, min_p=0.05, repetition_penalty=1.2, frequency_penalty=0.2,
                   presence_penalty=0.3, penalty_last_n=10, slide=5)
    cached, uncached = (G.generate(model, prompt, 2 * BLOCK, use_cache=use_cache, **options,
                                   generator=[torch.Generator().manual_seed(s) for s in (8, 9)])
                        for use_cache in (True, False))
    assert torch.equal(cached, uncached)


# ---- log-probabilities --------------------------------------------------------------------------------------------


def test_token_logprobs_equal_the_log_softmax_and_its_top_k():
    logits = random_logits(rows=3, vocab=30, seed=10)
    tokens = random_ids(3, 1, vocab=30, seed=11)
    chosen, top_ids, top_values = G.token_logprobs(logits, tokens, k=4)
    expected = numpy_log_softmax(logits.numpy())
    assert np.allclose(chosen.numpy()[:, 0], expected[np.arange(3), tokens[:, 0].numpy()], atol=1e-5)
    assert np.array_equal(top_ids.numpy(), np.argsort(-expected, axis=-1)[:, :4])
    assert np.allclose(top_values.numpy(), np.sort(expected, axis=-1)[:, ::-1][:, :4], atol=1e-5)
    assert G.token_logprobs(logits, tokens, k=0)[1].shape == (3, 0)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@torch.no_grad()
def test_logprobs_file_holds_the_models_own_log_probabilities_of_each_token(tmp_path):
    """Not those of the penalised, tempered, filtered distribution drawn from: the model's (OpenAI's convention)."""
    model, tokenizer = tiny_model("alibi"), CharTokenizer(CHARS)
    config = SampleConfig(start="abc", num_samples=2, max_new_tokens=10, temperature=0.6, top_k=5, min_p=0.1,
                          repetition_penalty=1.5, presence_penalty=0.5, seed=3, logprobs=3,
                          logprobs_file=str(tmp_path / "lp.jsonl"))
    texts = sample.sample(model, tokenizer, config)
    lines = read_jsonl(tmp_path / "lp.jsonl")
    assert [(line["sample"], line["index"]) for line in lines] == [(s, i) for s in range(2) for i in range(10)]
    for line in lines:
        text = texts[line["sample"]]
        before = tokenizer.encode(text[:3 + line["index"]])
        expected = numpy_log_softmax(model(torch.tensor([before]))[0][0, -1].numpy())
        assert line["token"] == text[3 + line["index"]] and line["id"] == tokenizer.encode(line["token"])[0]
        assert abs(line["logprob"] - expected[line["id"]]) < 1e-5
        assert [top["id"] for top in line["top_logprobs"]] == np.argsort(-expected)[:3].tolist()
        assert np.allclose([top["logprob"] for top in line["top_logprobs"]], np.sort(expected)[::-1][:3], atol=1e-5)
        assert [top["token"] for top in line["top_logprobs"]] == [CHARS[top["id"]] for top in line["top_logprobs"]]


@torch.no_grad()
def test_logprobs_list_each_samples_tokens_up_to_its_stop_and_the_stream_is_sample_0(tmp_path):
    model, tokenizer = tiny_model("learned"), CharTokenizer(CHARS)
    config = SampleConfig(start="ab", num_samples=3, max_new_tokens=40, temperature=1.0, top_k=None, seed=5)
    whole = sample.sample(model, tokenizer, config)
    stop = whole[0][2:][12:14]
    pieces = []
    stopped = sample.sample(model, tokenizer, SampleConfig(**{
        **config.__dict__, "stop": [stop], "keep_stop": True, "logprobs": 0,
        "logprobs_file": str(tmp_path / "lp.jsonl")}), on_text=pieces.append)
    assert "".join(pieces) == stopped[0] and len(stopped[0]) <= 2 + 14
    lines = read_jsonl(tmp_path / "lp.jsonl")
    for number, text in enumerate(stopped):
        assert text == whole[number][:len(text)]  # logprobs change no token
        tokens = [line["token"] for line in lines if line["sample"] == number]
        assert "".join(tokens) == text[2:]  # the tokens up to the one that completed the stop, and no more
    assert all(line["top_logprobs"] == [] for line in lines)


# ---- neutral values ----------------------------------------------------------------------------------------------


NEUTRAL = dict(min_p=0.0, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, penalty_last_n=6)


@pytest.mark.parametrize("pos_encoding", ["learned", "rope", "alibi"])
@torch.no_grad()
def test_neutral_values_leave_every_token_as_without_the_options(pos_encoding, tmp_path):
    model, tokenizer = tiny_model(pos_encoding), CharTokenizer(CHARS)
    for flags in (dict(temperature=1.0, top_k=None), dict(temperature=0.8, top_k=10, top_p=0.9, stop=["a"]),
                  dict(temperature=0)):
        config = SampleConfig(start="hello", num_samples=3, max_new_tokens=2 * BLOCK, seed=11, **flags)
        today = sample.sample(model, tokenizer, config)
        neutral = sample.sample(model, tokenizer, SampleConfig(**{**config.__dict__, **NEUTRAL}))
        logged = sample.sample(model, tokenizer, SampleConfig(**{**config.__dict__, **NEUTRAL, "logprobs": 2,
                                                                 "logprobs_file": str(tmp_path / "lp.jsonl"),
                                                                 "logprobs_overwrite": True}))
        assert neutral == today and logged == today, flags
        assert len(set(today)) > 1 or flags["temperature"] == 0  # the samples did differ from row to row


# ---- mistakes: one line each, exit status 2 ----------------------------------------------------------------------


@pytest.mark.parametrize("flag, fragment", [
    ("--min_p=1.5", "min_p=1.5 must be in [0, 1]"),
    ("--min_p=-0.1", "min_p=-0.1 must be in [0, 1]"),
    ("--min_p=nan", "min_p=nan must be in [0, 1]"),
    ("--repetition_penalty=0", "repetition_penalty=0.0 must be a finite number > 0 (1.0 is off)"),
    ("--repetition_penalty=-1.2", "repetition_penalty=-1.2 must be a finite number > 0"),
    ("--frequency_penalty=inf", "frequency_penalty=inf must be a finite number (0 is off)"),
    ("--presence_penalty=nan", "presence_penalty=nan must be a finite number"),
    ("--penalty_last_n=-1", "penalty_last_n=-1 must be >= 0 (0 counts the whole sequence)"),
    ("--presence_penalty=-1e308", "presence_penalty=-1e+308 would overflow the float32 logits it is subtracted "
                                  "from; give a number in [-1e+25, 1e+25] (0 is off)"),
    ("--repetition_penalty=1e-300", "repetition_penalty=1e-300 would overflow the float32 logits it divides or "
                                    "multiplies; give a number in [1e-25, 1e+25] (1.0 is off)"),
    ("--logprobs=-1", "logprobs=-1 must be >= 0"),
    ("--logprobs_file=lp.jsonl", "logprobs_file is a setting of --logprobs, which is off"),
    ("--logprobs_overwrite=True", "logprobs_overwrite is a setting of --logprobs, which is off"),
    ("--prompts_per_line=True", "prompts_per_line=True reads prompts from a file, one per line; give --start=FILE"),
])
def test_sampling_option_mistakes_are_one_line(tmp_path, capsys, flag, fragment):
    result = cli(sample.main, [f"--out_dir={tmp_path}", "--device=cpu", flag], capsys)
    assert_one_line_error(*result, fragment)  # refused as the flags are read: before the model is looked for


def test_compile_without_the_cache_is_refused_as_the_flags_are_read(tmp_path, capsys):
    """Was: the uncached loop ran eager, and the last line said "(no cache, compiled decode step: its compilation
    included)"."""
    result = cli(sample.main, [f"--out_dir={tmp_path}", "--device=cpu", "--no_cache", "--compile"], capsys)
    assert_one_line_error(*result, "compile=True compiles the cached decode step, and no_cache=True runs the whole "
                          "window every step instead: compile would do nothing; drop --compile, or --no_cache")


def test_keep_stop_without_any_stop_is_refused_as_the_flags_are_read(tmp_path, capsys):
    """Was: sampled as without it: no --stop, and end_of_text_stops=False, leave nothing for it to keep."""
    result = cli(sample.main, [f"--out_dir={tmp_path}", "--device=cpu", "--keep_stop", "--end_of_text_stops=False"],
                 capsys)
    assert_one_line_error(*result, "keep_stop is a setting of the stops (--stop, <|endoftext|>), and this run has "
                          "none (no --stop; end_of_text_stops=False): it would do nothing; drop it, or give "
                          "--stop=TEXT")


@torch.no_grad()
def test_logprobs_past_the_vocabulary_and_an_unwritable_file_are_refused_before_sampling(tmp_path):
    model, tokenizer = tiny_model("learned"), CharTokenizer(CHARS)
    with pytest.raises(UserError, match=f"logprobs=38 must be at most the vocabulary's {VOCAB} tokens; "
                                               f"give --logprobs={VOCAB} or fewer"):
        sample.sample(model, tokenizer, SampleConfig(logprobs=38, logprobs_file=str(tmp_path / "lp.jsonl")))
    with pytest.raises(UserError, match=r"logprobs_file='.*' cannot be written: Is a directory; give a "
                                               r"writable --logprobs_file=PATH"):
        sample.sample(model, tokenizer, SampleConfig(start="a", logprobs=1, logprobs_file=str(tmp_path)))
    assert not (tmp_path / "lp.jsonl").exists()


@torch.no_grad()
def test_a_logprobs_file_already_there_stays_whole_until_the_new_one_is(tmp_path, monkeypatch):
    """Was: opened for writing before sampling, so Ctrl-C while sampling left an earlier file empty."""
    model, tokenizer = tiny_model("learned"), CharTokenizer(CHARS)
    earlier = tmp_path / "lp.jsonl"
    earlier.write_text("an earlier run's log-probabilities\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sample, "draw", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sample.sample(model, tokenizer, SampleConfig(start="a", logprobs=1, logprobs_file=str(earlier),
                                                     logprobs_overwrite=True))
    assert earlier.read_text() == "an earlier run's log-probabilities\n"
    assert [p.name for p in tmp_path.iterdir()] == ["lp.jsonl"]


@torch.no_grad()
def test_prompts_per_line_sample_each_prompt_as_alone_in_one_batch(tmp_path):
    """Three prompts of 2, 7 and 4 characters (and a blank line, skipped), 2 samples each, one left-padded batch:
    row i (prompt i // 2) is what that prompt alone gives with --seed=seed + i, stops and penalties included."""
    model, tokenizer = tiny_model("rope"), CharTokenizer(CHARS)
    lines = ["ab", "hello w", "", "xyz1"]
    (tmp_path / "prompts.txt").write_text("\n".join(lines) + "\n")
    kw = dict(num_samples=2, max_new_tokens=BLOCK - 7, temperature=1.0, top_k=None, seed=5, repetition_penalty=1.2)
    pieces = []  # --stream: the first prompt's first sample
    together = sample.sample(model, tokenizer, SampleConfig(start=f"FILE:{tmp_path / 'prompts.txt'}",
                                                            prompts_per_line=True, **kw), on_text=pieces.append)
    assert "".join(pieces) == together[0]
    prompts = [line for line in lines if line]
    assert len(together) == 6
    for i, text in enumerate(together):
        alone = sample.sample(model, tokenizer, SampleConfig(start=prompts[i // 2], **{**kw, "num_samples": 1,
                                                                                       "seed": 5 + i}))
        assert text == alone[0], i
    stop = together[3][7:][2:4]  # the stop cuts row 3 (and perhaps others) where it would cut it alone
    stopped = sample.sample(model, tokenizer, SampleConfig(start=f"FILE:{tmp_path / 'prompts.txt'}",
                                                           prompts_per_line=True, stop=[stop], **kw))
    assert stopped[3] == together[3][:7 + 2]
    (tmp_path / "blank.txt").write_text("\n \n")
    with pytest.raises(UserError, match="has no line with text"):
        sample.sample(model, tokenizer, SampleConfig(start=f"FILE:{tmp_path / 'blank.txt'}", prompts_per_line=True))


@torch.no_grad()
def test_logprobs_go_beside_the_run_and_never_over_a_file_there(tmp_path, monkeypatch):
    """Was: logprobs.jsonl in the folder the command ran from (the repository's root, not ignored), replaced
    without a word. Now beside the run (out_dir, or the checkpoint init_from names) or where --logprobs_file says,
    and a file already there is kept, byte for byte, unless --logprobs_overwrite=True."""
    model, tokenizer = tiny_model("learned"), CharTokenizer(CHARS)
    (tmp_path / "here").mkdir()
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    config = SampleConfig(start="a", max_new_tokens=4, num_samples=1, out_dir=str(tmp_path / "run"), logprobs=1)
    sample.sample(model, tokenizer, config)
    written = (tmp_path / "run" / "logprobs.jsonl").read_bytes()
    assert len(written.splitlines()) == 4 and not list((tmp_path / "here").iterdir())
    with pytest.raises(UserError, match=r"logprobs\.jsonl is already there .*; give --logprobs_overwrite=True to "
                                        r"replace it, or another --logprobs_file=PATH"):
        sample.sample(model, tokenizer, replace(config, seed=7))
    assert (tmp_path / "run" / "logprobs.jsonl").read_bytes() == written
    sample.sample(model, tokenizer, replace(config, seed=7, logprobs_overwrite=True))
    assert (tmp_path / "run" / "logprobs.jsonl").read_bytes() != written
    (tmp_path / "run" / "ckpt.pt").write_bytes(b"")  # init_from names it: beside it
    assert sample.logprobs_path(replace(config, init_from=str(tmp_path / "run" / "ckpt.pt"))) == \
        tmp_path / "run" / "logprobs.jsonl"
    assert sample.logprobs_path(replace(config, logprobs_file="lp.jsonl")) == Path("lp.jsonl")
    with pytest.raises(UserError, match=r"init_from='gpt2' is no run of ours .*; give --logprobs_file=PATH"):
        sample.sample(model, tokenizer, replace(config, init_from="gpt2"))
    assert not list((tmp_path / "here").iterdir())
