"""The learned BPE (bpe_train.py, tokenizer.BPETokenizer) against HF tokenizers' own encoder, the text itself
(every encoding must decode back to it), hand-counted bytes and characters, and a second training."""

import json
import random
import unicodedata

import numpy as np
import pytest

from errors import UserError
from text.bpe_train import MIN_VOCAB_SIZE, TokenizerConfig, byte_symbols, learn_bpe, learned_tokens, train_hf
from text.dataset import PrepareConfig, prepare
from text.tokenizer import (
    END_OF_TEXT,
    BPETokenizer,
    CharTokenizer,
    GPT2Tokenizer,
    from_description,
    load_tokenizer,
    token_byte_counts,
    token_char_counts,
    tokenizer_difference,
)

UNICODE = ["héllo 😀 wörld", "日本語のテキスト、中文文本。한국어", "e\u0301 a\u0308 n\u0303 (combining marks)",
           "👩‍👩‍👧‍👦 🏳️‍🌈 flags 🇫🇷", "tabs\tand\r\nnewlines\n\n\n  spaces   ", "\u0000\u001f\u007f control", "Ω≈ç√∫ ∞",
           "<|endoftext|> as plain text", "", " ", "'s 're 'll contractions", "١٢٣ ٤٥٦ arabic digits"]


def learn(text: str, vocab_size: int, **settings) -> BPETokenizer:
    return learn_bpe([text], vocab_size, 1 << 27, len(text.encode()), progress=False, **settings)


@pytest.fixture(scope="module")
def bpe(corpus_text) -> BPETokenizer:
    return learn(corpus_text, 1024)


def random_text(seed: int) -> str:
    """Random bytes decoded with replacement: U+FFFD and whatever else they spell."""
    draw = random.Random(seed)
    return bytes(draw.randrange(256) for _ in range(2000)).decode("utf-8", errors="replace")


@pytest.mark.parametrize("kind", ["bpe", pytest.param("gpt2", marks=pytest.mark.gpt2_bpe)])
@pytest.mark.parametrize("text", [*UNICODE, random_text(0), random_text(1)])
def test_any_unicode_round_trips(bpe, text, kind):
    tokenizer = bpe if kind == "bpe" else GPT2Tokenizer()
    assert tokenizer.decode(tokenizer.encode_documents(text).tolist()) == text
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert unicodedata.normalize("NFC", "e\u0301") != "e\u0301"  # the combining marks really are not composed


def test_special_token_is_last_and_plain_text_in_documents(bpe):
    assert bpe.vocab_size == 1024 and bpe.eot_token == 1023 == bpe.start_token()
    assert bpe.encode(END_OF_TEXT) == [1023]  # a prompt may hold it
    assert 1023 not in bpe.encode_documents("a " + END_OF_TEXT).tolist()  # a corpus's literal string is text
    assert bpe.decode([1023]) == END_OF_TEXT


def hf_ids_as_ours(hf, tokens: list[bytes], text: str) -> list[int]:
    """HF's encoding of text, its ids renumbered to ours through the bytes each token stands for (HF finds
    special-token strings in the text, as our encode does for prompts)."""
    symbols = byte_symbols()
    rank = {token: i for i, token in enumerate(tokens)}
    by_hf_id = {i: rank[bytes(symbols[c] for c in token)] for token, i in hf.get_vocab().items()
                if token != END_OF_TEXT}
    by_hf_id[hf.token_to_id(END_OF_TEXT)] = len(tokens)
    return [by_hf_id[i] for i in hf.encode(text).ids]


@pytest.mark.parametrize("vocab_size", [300, 2048])
def test_tiktoken_ids_equal_hf_trainers_own_encoder_on_real_text(corpus_text, vocab_size):
    train, held_out = corpus_text[:24_000], corpus_text[24_000:]
    hf = train_hf([train], vocab_size, 1 << 27, len(train), progress=False)
    tokens = learned_tokens(hf)
    assert len(tokens) == vocab_size - 1
    fast = BPETokenizer(tokens)
    for text in (train, held_out, *UNICODE):
        assert fast.encode(text) == hf_ids_as_ours(hf, tokens, text)
    assert len(fast.encode_documents(held_out)) < 0.8 * len(held_out.encode())  # it did learn to merge


def test_training_is_deterministic(corpus_text):
    first, second = learn(corpus_text, 700), learn(corpus_text, 700)
    assert first.tokens == second.tokens
    assert first.description() == second.description()
    assert learn(corpus_text[:20_000], 700).tokens != first.tokens  # another text gives other merges


def test_sample_bytes_bounds_what_training_reads(corpus_text):
    head = corpus_text[:5000]
    while len(head.encode("utf-8")) > 5000:  # the characters that fit whole in 5000 bytes
        head = head[:-1]
    assert len(head) < 5000  # the corpus is not ASCII there: bytes, not characters, are counted
    assert learn_bpe([corpus_text], 400, 5000, len(corpus_text), progress=False).tokens == learn(head, 400).tokens


def decode_train(folder) -> str:
    """The text of a prepared dataset's train split: what its BPE learned from."""
    return load_tokenizer(folder).decode(np.fromfile(folder / "train.bin", dtype=np.uint16).tolist())


def test_merges_depend_on_the_training_split_only(tmp_path, corpus_text):
    tokenizer = TokenizerConfig(tokenizer="bpe", vocab_size=600)
    config = PrepareConfig(val_fraction=0.1, test_fraction=0.1)
    prepare(corpus_text, tmp_path / "a", tokenizer, config)
    n_train = len(decode_train(tmp_path / "a"))
    other = corpus_text[:n_train] + corpus_text[n_train:].upper()  # other val and test text, the same cuts
    prepare(other, tmp_path / "b", tokenizer, config)
    a, b = (json.loads((tmp_path / name / "tokenizer.json").read_text()) for name in "ab")
    assert a["tokens"] == b["tokens"] and tokenizer_difference(a, b) is None
    assert (tmp_path / "a" / "train.bin").read_bytes() == (tmp_path / "b" / "train.bin").read_bytes()
    assert (tmp_path / "a" / "val.bin").read_bytes() != (tmp_path / "b" / "val.bin").read_bytes()
    changed = corpus_text[:100].upper() + corpus_text[100:]  # the training text itself changed
    prepare(changed, tmp_path / "c", tokenizer, config)
    c = json.loads((tmp_path / "c" / "tokenizer.json").read_text())
    assert "other merges" in tokenizer_difference(a, c)


def test_prepared_tokenizer_json_reloads_to_the_same_encoder(tmp_path, corpus_text):
    description = prepare(corpus_text, tmp_path, TokenizerConfig(tokenizer="bpe", vocab_size=500))
    stored = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    assert stored == description and stored["kind"] == "bpe" and len(stored["tokens"]) == 499
    assert all(isinstance(token, str) for token in stored["tokens"])  # plain data: hex strings
    again = learn(decode_train(tmp_path), 500)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, BPETokenizer) and loaded.tokens == again.tokens
    for text in (corpus_text, *UNICODE):
        assert loaded.encode_documents(text).tolist() == again.encode_documents(text).tolist()
    ids = np.concatenate([np.fromfile(tmp_path / f"{split}.bin", dtype=np.uint16) for split in ("train", "test",
                                                                                                   "val")])
    assert loaded.decode(ids.tolist()) == corpus_text  # each part encoded alone: cut at character boundaries
    assert from_description(json.loads(json.dumps(description))).tokens == loaded.tokens  # a checkpoint's copy


def test_a_damaged_bpe_description_is_one_line(tmp_path, corpus_text):
    description = prepare(corpus_text, tmp_path, TokenizerConfig(tokenizer="bpe", vocab_size=300))
    for damage in ({"tokens": description["tokens"][1:]}, {"tokens": ["zz", *description["tokens"][1:]]},
                   {"special_tokens": {}}, {"pattern": None}):
        (tmp_path / "tokenizer.json").write_text(json.dumps({**description, **damage}))
        with pytest.raises(UserError, match="a bpe tokenizer needs .*prepare.py"):
            load_tokenizer(tmp_path)


# ---- bytes and characters per token -------------------------------------------------------------------------


@pytest.mark.gpt2_bpe
def test_bytes_and_characters_per_token_by_hand():
    text = "héllo 😀"  # h é l l o ␠ 😀: 7 characters; 1+2+1+1+1+1+4 = 11 UTF-8 bytes
    char = CharTokenizer.from_text(text)
    byte_counts, char_counts = token_byte_counts(char), token_char_counts(char)
    assert dict(zip(char.chars, byte_counts.tolist(), strict=True)) == {" ": 1, "h": 1, "l": 1, "o": 1, "é": 2,
                                                                       "😀": 4}
    assert char_counts.tolist() == [1] * 6
    gpt2 = GPT2Tokenizer()
    byte_counts, char_counts = token_byte_counts(gpt2), token_char_counts(gpt2)
    assert len(byte_counts) == 50257 and byte_counts[50256] == 0 == char_counts[50256]
    assert byte_counts[gpt2.encode("hello")[0]] == 5 and byte_counts[gpt2.encode(" the")[0]] == 4
    for tokenizer in (char, gpt2):
        ids = tokenizer.encode(text)
        assert int(token_byte_counts(tokenizer)[ids].sum()) == 11
        assert int(token_char_counts(tokenizer)[ids].sum()) == 7
    emoji = gpt2.encode("😀")
    assert len(emoji) > 1 and token_char_counts(gpt2)[emoji].tolist().count(1) == 1  # one token holds its lead


def test_bytes_per_token_of_a_learned_bpe_sum_to_the_texts_bytes(bpe):
    assert token_byte_counts(bpe)[:256].tolist() == [1] * 256 and token_byte_counts(bpe)[bpe.eot_token] == 0
    for text in UNICODE:
        ids = bpe.encode_documents(text)
        assert token_byte_counts(bpe)[ids].sum() == len(text.encode("utf-8"))
        assert token_char_counts(bpe)[ids].sum() == len(text)


# ---- bad settings -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings, message", [
    (dict(tokenizer="bpe", vocab_size=256), rf"vocab_size=256 must be in \[{MIN_VOCAB_SIZE}, "),
    (dict(tokenizer="bpe"), r"vocab_size=0 must be in \[257, .*--vocab_size=2048"),
    (dict(tokenizer="char", vocab_size=512), r"vocab_size=512 applies to --tokenizer=bpe only"),
    (dict(tokenizer="words"), r"tokenizer='words' must be char, gpt2 or bpe"),
    (dict(tokenizer="bpe", vocab_size=512, tokenizer_sample_bytes=0), r"tokenizer_sample_bytes=0 must be"),
    (dict(tokenizer="gpt2", tokenizer_sample_bytes=1000), r"tokenizer_sample_bytes=1000 applies to --tokenizer=bpe"),
])
def test_tokenizer_config_validation(settings, message):
    with pytest.raises(ValueError, match=message):
        TokenizerConfig(**settings)


def test_a_vocabulary_larger_than_the_text_allows(tmp_path):
    text = "abab abab cdcd. " * 40  # 640 characters: train the first 512, moved back to the space before "abab"
    with pytest.raises(UserError, match=r"vocab_size=2000 needs 1,743 merges, more than the 511 bytes"):
        prepare(text, tmp_path / "a", TokenizerConfig(tokenizer="bpe", vocab_size=2000))
    with pytest.raises(UserError, match=r"vocab_size=400 is more than this training text allows: it has only "
                                        r"\d+ distinct tokens to learn; use --vocab_size=\d+ or less"):
        prepare(text, tmp_path / "b", TokenizerConfig(tokenizer="bpe", vocab_size=400))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_model_trained_on_a_learned_bpe_resumes_and_samples_with_no_tokenizer_flag(tmp_path, corpus_text):
    """The description (tokens included) goes into the checkpoint the way char's and GPT-2's do."""
    from model import GPTConfig
    from sample import SampleConfig, load_model, sample
    from train import TrainConfig, train

    prepare(corpus_text, tmp_path / "data", TokenizerConfig(tokenizer="bpe", vocab_size=300))
    settings = dict(out_dir=str(tmp_path / "out"), dataset=str(tmp_path / "data"), eval_interval=2, eval_iters=1,
                    batch_size=2, device="cpu", compile=False, progress=False, warmup_iters=1, lr_decay_iters=4)
    shape = GPTConfig(block_size=8, n_layer=1, n_head=2, n_embd=16)
    train(TrainConfig(**settings, max_iters=2), shape)
    train(TrainConfig(**settings, max_iters=4, init_from="resume"), shape)
    model, tokenizer = load_model("resume", str(tmp_path / "out"))
    assert isinstance(tokenizer, BPETokenizer) and tokenizer.tokens == load_tokenizer(tmp_path / "data").tokens
    assert model.config.vocab_size == 300
    texts = sample(model, tokenizer, SampleConfig(start="First", num_samples=2, max_new_tokens=5, device="cpu"))
    assert len(texts) == 2 and all(text.startswith("First") for text in texts)


def test_byte_symbols_are_hfs_byte_level_alphabet():
    from tokenizers.pre_tokenizers import ByteLevel

    symbols = byte_symbols()
    assert sorted(symbols) == sorted(ByteLevel.alphabet()) and sorted(symbols.values()) == list(range(256))
    assert (symbols["Ġ"], symbols["Ċ"], symbols["ĉ"], symbols["A"], symbols["é"]) == (0x20, 0x0A, 0x09, 0x41, 0xE9)


def test_a_pattern_that_backtracks_without_bound_is_one_line(capsys):
    """Was: fancy-regex's BacktrackLimitExceeded as a Rust PanicException (a BaseException) and its traceback."""
    from errors import main_guard
    from text.tokenizer import BPETokenizer

    tokenizer = BPETokenizer([bytes([i]) for i in range(256)], pattern=r"(a+)+(?!c)b")
    assert tokenizer.encode("ab") == [ord("a"), ord("b")]

    for encode in (tokenizer.encode, tokenizer.encode_documents):  # a ValueError, and a Rust panic
        with pytest.raises(SystemExit) as stopped:
            main_guard(lambda argv, encode=encode: encode("a" * 3000 + "!"), [])
        assert stopped.value.code == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert "backtracks without bound" in last and "(a+)+(?!c)b" in last and "GPT2_PATTERN" in last


def test_the_bpe_trainer_reads_a_long_unbroken_run_in_pieces():
    """Was: HF's trainer, quadratic in a pre-token's length, did not finish on a 1 MB line without spaces (DNA,
    base64), nor let Ctrl-C through. It now reads such runs in pieces of MAX_RUN characters; text without one is read
    as it was, whole."""
    import random
    import re

    from text.bpe_train import MAX_RUN, short_runs

    rng = random.Random(0)
    dna = "".join(rng.choice("ACGT") for _ in range(5000))
    text = f"a few words\n{dna} then {' ' * 600}more {dna[:300]}!"
    pieces = list(short_runs(text))
    assert "".join(pieces) == text
    longest = max(len(run) for piece in pieces for run in re.findall(r"\S+|\s+", piece))
    assert longest == MAX_RUN and len(pieces) == 5000 // MAX_RUN + 600 // MAX_RUN + 300 // MAX_RUN + 1
    assert list(short_runs("no run here is longer than the limit")) == ["no run here is longer than the limit"]
