"""Choosing a preparer's tokenizer, and learning a byte-level BPE from the training split with HF `tokenizers`.

The learned merges become a tokenizer.BPETokenizer (tiktoken ranks): HF's Rust trainer learns them, tiktoken
encodes with them. Both split the text with the same pattern (GPT-2's) and merge within the pieces, so their
ids agree (tests/test_tokenizer.py checks this on real text). Training reads at most `tokenizer_sample_bytes` of
the training text, so memory and time stay bounded whatever the corpus size.
"""

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tqdm.auto import tqdm

from errors import UserError
from text.tokenizer import END_OF_TEXT, GPT2_PATTERN, KINDS, BPETokenizer

SPECIAL_TOKENS = (END_OF_TEXT,)
MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)  # every byte, then the special tokens
MAX_VOCAB_SIZE = 1 << 20  # ids far past any useful vocabulary; uint32 on disk above 65,536
SAMPLE_BYTES = 1 << 27  # tokenizer_sample_bytes' default: 128 MiB


@dataclass
class TokenizerConfig:
    tokenizer: str = ""  # char | gpt2 | bpe (learned from the training split); empty: the dataset's own default
    vocab_size: int = 0  # --tokenizer=bpe only: tokens in all, the 256 bytes and <|endoftext|> included
    tokenizer_sample_bytes: int = SAMPLE_BYTES  # bpe: learn from at most this many bytes of training text (128 MiB)

    def __post_init__(self) -> None:
        if self.tokenizer not in ("", *KINDS):
            raise ValueError(f"tokenizer={self.tokenizer!r} must be char, gpt2 or bpe")
        if self.tokenizer == "bpe" and not MIN_VOCAB_SIZE <= self.vocab_size <= MAX_VOCAB_SIZE:
            raise ValueError(f"vocab_size={self.vocab_size} must be in [{MIN_VOCAB_SIZE}, {MAX_VOCAB_SIZE}] for "
                             f"--tokenizer=bpe (256 byte tokens + {END_OF_TEXT}, then the merges); e.g. "
                             "--vocab_size=2048")
        if self.tokenizer != "bpe" and self.vocab_size:
            raise ValueError(f"vocab_size={self.vocab_size} applies to --tokenizer=bpe only (a char vocabulary is "
                             "the text's characters, gpt2's is 50257); drop it, or add --tokenizer=bpe")
        if self.tokenizer_sample_bytes < 1:
            raise ValueError(f"tokenizer_sample_bytes={self.tokenizer_sample_bytes} must be at least 1")
        if self.tokenizer != "bpe" and self.tokenizer_sample_bytes != SAMPLE_BYTES:  # only a BPE learns from a sample
            raise ValueError(f"tokenizer_sample_bytes={self.tokenizer_sample_bytes} applies to --tokenizer=bpe only "
                             "(char and gpt2 tokenizers learn nothing): it would do nothing; drop it, or add "
                             "--tokenizer=bpe")


def byte_symbols() -> dict[str, int]:
    """HF's byte-level alphabet (GPT-2's): each byte as one printable character; here, character -> byte.
    Printable Latin-1 bytes stand for themselves, the other 68 for the characters from U+0100 on, in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + i): b for i, b in enumerate(others)}}


def sample(texts: Iterable[str], limit: int, bar) -> Iterator[str]:
    """The texts, up to limit UTF-8 bytes in all (the last one cut short), counted on the bar, each in pieces that
    end inside every run of more than MAX_RUN characters without a space (or of spaces alone)."""
    left = limit
    for text in texts:
        size = len(text.encode("utf-8"))
        if size > left:  # a character cut in two is left out
            text, size = text.encode("utf-8")[:left].decode("utf-8", errors="ignore"), left
        left -= size
        bar.update(size)
        yield from short_runs(text)
        if not left:
            return


# HF's trainer merges within each pre-token in time quadratic in its length: a text with one unbroken run (base64,
# DNA: 200 KB took 62 s, 1 MB did not end) stalled it, and Ctrl-C with it. The trainer reads such a run in pieces of
# MAX_RUN characters; it learns no pair across a cut (one in MAX_RUN), and encoding (tiktoken) still reads the run
# whole.
MAX_RUN = 256
LONG_RUN = re.compile(rf"\S{{{MAX_RUN + 1},}}|\s{{{MAX_RUN + 1},}}")


def short_runs(text: str) -> Iterator[str]:
    """text in pieces, each cut after every MAX_RUN characters of a longer run (the whole text where none is)."""
    start = 0
    for run in LONG_RUN.finditer(text):
        for cut in range(run.start() + MAX_RUN, run.end(), MAX_RUN):
            yield text[start:cut]
            start = cut
    yield text[start:]


def hf_trainer(vocab_size: int, progress: bool):
    """An untrained HF BPE model with GPT-2's pre-tokenization, and its trainer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), min_frequency=0,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=progress)
    return hf, trainer


def learned_tokens(hf) -> list[bytes]:
    """The trained HF model's tokens as bytes, by tiktoken rank: the 256 bytes first, then the merges in the
    order they were learned (HF numbers them so). Special tokens are left out: BPETokenizer puts them last."""
    symbols = byte_symbols()
    by_id = sorted((i, token) for token, i in hf.get_vocab().items() if token not in SPECIAL_TOKENS)
    merged = [bytes(symbols[c] for c in token) for _, token in by_id if len(token) > 1]
    return [bytes([b]) for b in range(256)] + merged


def learn_bpe(texts: Iterable[str], vocab_size: int, sample_bytes: int, total_bytes: int,
              progress: bool = True) -> BPETokenizer:
    """A BPE of vocab_size tokens learned from texts (training text only, pieces cut where no token crosses),
    reading at most sample_bytes of it; total_bytes (the training text's size) sizes the bar."""
    tokens = learned_tokens(train_hf(texts, vocab_size, sample_bytes, total_bytes, progress))
    if len(tokens) + len(SPECIAL_TOKENS) < vocab_size:
        raise UserError(f"vocab_size={vocab_size} is more than this training text allows: it has only "
                        f"{len(tokens) + len(SPECIAL_TOKENS)} distinct tokens to learn; use --vocab_size="
                        f"{len(tokens) + len(SPECIAL_TOKENS)} or less, or a longer text")
    return BPETokenizer(tokens)


def train_hf(texts: Iterable[str], vocab_size: int, sample_bytes: int, total_bytes: int, progress: bool):
    """HF's trained tokenizer (learn_bpe's source, and the reference its ids are tested against)."""
    if total_bytes < 1:
        raise UserError("the training split holds no text to learn a BPE from; use a longer --input")
    merges = vocab_size - MIN_VOCAB_SIZE
    if merges > min(total_bytes, sample_bytes):  # each merge joins at least one pair of the text's bytes
        raise UserError(f"vocab_size={vocab_size} needs {merges:,} merges, more than the "
                        f"{min(total_bytes, sample_bytes):,} bytes of training text read allow; use a smaller "
                        "--vocab_size or a longer text")
    hf, trainer = hf_trainer(vocab_size, progress)
    with tqdm(total=min(total_bytes, sample_bytes), unit="B", unit_scale=True, unit_divisor=1024,
              disable=not progress, desc="reading text for BPE") as bar:
        hf.train_from_iterator(sample(texts, sample_bytes, bar), trainer=trainer)
    return hf
