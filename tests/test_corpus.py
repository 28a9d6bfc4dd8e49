"""corpus.py and data/corpus/prepare.py against tiktoken called directly on whole documents, the files read back
with NumPy, and the peak memory the kernel reports for a preparer run in a subprocess."""

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from errors import UserError
from text.corpus import CorpusConfig, prepare_corpus, text_pieces
from text.cuts import line_start_before_end
from text.dataset import get_batch, load_split
from text.tokenizer import GPT2Tokenizer, load_tokenizer

REPO = Path(__file__).resolve().parents[1]
EOT = 50256
# Whitespace runs before letters, digits, punctuation and non-ASCII: the places where a careless cut would change
# the tokens ("\n\u00a0" is one GPT-2 token). "<|endoftext|>" inside a document is plain text, not the separator.
TRICKY = ("First line\n\n  indented\n\tTab\r\nWindows\n 1234 numbers\n\u00a0nbsp\n\u00a0 nbsp-space\n"
          "\u3000ideographic space\n"
          "caf\u00e9 na\u00efve \u4f60\u597d\n\n\n's contraction\n<|endoftext|> literal\n   \n!bang\n"
          "A paragraph.\n\n*Another* after a blank line,\r\n\r\nand a Windows one.\n")


def encode(text: str) -> list[int]:
    return GPT2Tokenizer().encoding.encode_ordinary(text)


def write_corpus(root: Path, shakespeare: str) -> list[str]:
    """A nested folder of .txt and .jsonl files; returns its documents in the order the preparer reads them."""
    words = shakespeare.split()
    draw = random.Random(0)
    texts = [TRICKY * 3, shakespeare[:6000]] + [" ".join(draw.choices(words, k=draw.randint(1, 80))) for _ in range(60)]
    (root / "b").mkdir(parents=True)
    (root / "a.txt").write_text(texts[0], encoding="utf-8")
    (root / "b" / "c.txt").write_text(texts[1], encoding="utf-8")
    (root / "b" / "empty.txt").write_text("", encoding="utf-8")
    (root / "notes.md").write_text("not part of the corpus", encoding="utf-8")
    lines = [json.dumps({"id": i, "text": text}) for i, text in enumerate(texts[2:])]
    lines.insert(5, "")  # a blank line is no document
    (root / "b" / "d.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return texts  # sorted paths: a.txt, b/c.txt, b/d.jsonl (b/empty.txt holds no document)


def read_streams(out: Path) -> tuple[dict, list[int], list[int]]:
    description = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    train, val = (np.fromfile(out / f"{split}.bin", dtype=description["dtype"]).tolist() for split in ("train", "val"))
    return description, train, val


def documents_of(stream: list[int]) -> list[list[int]]:
    """A token stream cut after each end-of-text; every document must end with one."""
    assert stream and stream[-1] == EOT
    cuts = [i + 1 for i, token in enumerate(stream) if token == EOT]
    return [stream[start:end - 1] for start, end in zip([0, *cuts[:-1]], cuts, strict=True)]


def test_line_start_before_end_by_hand():
    assert line_start_before_end(b"ab\ncd\nef") == 6
    assert line_start_before_end(b"ab\ncd\n ef\n\n") == 3  # a space or newline after the newline is no cut
    assert line_start_before_end(b"ab\n\ncd\r\nef") == 0  # nor a whitespace before it ("\n\n" at the end is one piece)
    assert line_start_before_end(b"ab\n\xc3\xa9") == 0  # nor a non-ASCII character (it may be whitespace)
    assert line_start_before_end(b"abc") == line_start_before_end(b"") == line_start_before_end(b"\n") == 0


@pytest.mark.gpt2_bpe
@pytest.mark.parametrize("chunk_bytes", [1, 3, 16, 1 << 20])
def test_text_pieces_encode_to_the_tokens_of_the_whole_file(tmp_path, chunk_bytes):
    (tmp_path / "t.txt").write_bytes(TRICKY.encode() * 4)
    pieces = list(text_pieces(tmp_path / "t.txt", chunk_bytes))
    assert "".join(text for text, _ in pieces) == TRICKY * 4
    assert sum(size for _, size in pieces) == len(TRICKY.encode()) * 4
    assert len(pieces) > 10 or chunk_bytes == 1 << 20
    assert [t for text, _ in pieces for t in encode(text)] == encode(TRICKY * 4)


@pytest.mark.gpt2_bpe
@pytest.mark.slow
def test_token_stream_is_tiktokens_per_document_whatever_the_worker_count(tmp_path, corpus_text):
    documents = write_corpus(tmp_path / "corpus", corpus_text)
    streams = {}
    for workers in (1, 2):
        config = CorpusConfig(input=str(tmp_path / "corpus"), val_fraction=0.25, workers=workers, chunk_bytes=512,
                              progress=False)
        description = prepare_corpus(config, tmp_path / f"out{workers}")
        streams[workers] = read_streams(tmp_path / f"out{workers}")
        assert description == streams[workers][0]
    assert streams[1] == streams[2]
    description, train, val = streams[1]

    # Each document whole in exactly one split, followed by end-of-text; each split in corpus order.
    assert len(set(documents)) == len(documents)
    val_docs = documents_of(val)
    is_val = [encode(text) in val_docs for text in documents]
    for split, stream in (("train", train), ("val", val)):
        chosen = [text for text, v in zip(documents, is_val, strict=True) if v == (split == "val")]
        assert stream == [token for text in chosen for token in [*encode(text), EOT]]
        assert description[f"{split}_documents"] == len(chosen) and description[f"{split}_tokens"] == len(stream)
    assert 5 <= sum(is_val) <= 27  # 62 documents, val_fraction 0.25: a 1-in-1000 binomial range
    # The same seed draws the same documents; another seed others.
    again = prepare_corpus(CorpusConfig(input=str(tmp_path / "corpus"), val_fraction=0.25, seed=7, workers=1,
                                        progress=False), tmp_path / "seed7")
    assert again["val_tokens"] != description["val_tokens"]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.gpt2_bpe
def test_a_failed_prepare_leaves_the_old_dataset_whole(tmp_path, corpus_text):
    write_corpus(tmp_path / "corpus", corpus_text)
    out = tmp_path / "out"
    prepare_corpus(CorpusConfig(input=str(tmp_path / "corpus"), val_fraction=0.25, workers=1, progress=False), out)
    before = snapshot(out)
    with pytest.raises(ValueError, match="--overwrite=True"):
        prepare_corpus(CorpusConfig(input=str(tmp_path / "corpus"), workers=1, progress=False), out)
    # A bad line after a megabyte of good ones: tokens were already written when it fails.
    good = json.dumps({"text": corpus_text[:20_000]})
    (tmp_path / "corpus" / "z.jsonl").write_text("\n".join([good] * 60 + ['{"text": "cut off'] + [good]) + "\n")
    config = CorpusConfig(input=str(tmp_path / "corpus"), val_fraction=0.25, workers=1, chunk_bytes=4096,
                          overwrite=True, progress=False)
    with pytest.raises(UserError, match=r"z\.jsonl:61: not a JSON object"):
        prepare_corpus(config, out)
    assert snapshot(out) == before  # no temporary file left either


@pytest.mark.parametrize("content, message", [
    ('{"body": "x"}\n', r"d\.jsonl:1: no text field 'text' \(the line has \['body'\]\); .* --text_field=NAME"),
    ('["text"]\n', r"d\.jsonl:1: no text field 'text'"),
    ('{"text": 3}\n', r"d\.jsonl:1: no text field 'text'"),
])
@pytest.mark.gpt2_bpe
def test_jsonl_errors_name_the_line_and_the_fix(tmp_path, content, message):
    (tmp_path / "d.jsonl").write_text(content)
    with pytest.raises(ValueError, match=message):
        prepare_corpus(CorpusConfig(input=str(tmp_path / "d.jsonl"), workers=1, progress=False), tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.gpt2_bpe
def test_input_errors(tmp_path):
    def prepare(input: str, **settings):
        return prepare_corpus(CorpusConfig(input=input, workers=1, progress=False, **settings), tmp_path / "out")

    with pytest.raises(ValueError, match="no --input"):
        prepare("")
    with pytest.raises(UserError, match="is no file, folder, or glob pattern that matches a file"):
        prepare(str(tmp_path / "missing*.txt"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "readme.md").write_text("x")
    with pytest.raises(UserError, match="holds no .txt or .jsonl files"):
        prepare(str(tmp_path / "docs"))
    with pytest.raises(ValueError, match=r"readme\.md' is neither \.txt"):
        prepare(str(tmp_path / "docs" / "*"))
    (tmp_path / "docs" / "bad.txt").write_bytes(b"fine\n\xff bad")
    with pytest.raises(ValueError, match=r"bad\.txt' is not UTF-8 text: byte 0xff at offset 5"):
        prepare(str(tmp_path / "docs" / "bad.txt"), chunk_bytes=2)
    (tmp_path / "docs" / "one.txt").write_text("a single document")
    with pytest.raises(ValueError, match=r"1 documents gave 0 for validation and 1 for training \(val_fraction"):
        prepare(str(tmp_path / "docs" / "one.txt"), val_fraction=0.5)
    for settings, message in [({"val_fraction": 1.0}, "val_fraction=1.0 must be in"),
                              ({"workers": -1}, "workers=-1 must be >= 0"), ({"chunk_bytes": 0}, "chunk_bytes=0"),
                              ({"text_field": ""}, "text_field is empty")]:
        with pytest.raises(ValueError, match=message):
            CorpusConfig(**settings)


@pytest.mark.gpt2_bpe
@pytest.mark.slow
def test_prepare_script_then_the_training_data_loader(tmp_path, corpus_text, script_env):
    write_corpus(tmp_path / "corpus", corpus_text)
    command = [sys.executable, str(REPO / "data" / "corpus" / "prepare.py"), f"--input={tmp_path}/corpus/**/*.txt",
               f"--out_dir={tmp_path / 'out'}", "--val_fraction=0.5", "--seed=3", "--workers=2"]
    result = subprocess.run(command, capture_output=True, text=True, env=script_env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "train" in result.stdout and "tokenizing" in result.stderr  # the bar, in bytes
    out = tmp_path / "out"
    description, train, val = read_streams(out)
    assert description["train_documents"] + description["val_documents"] == 2
    assert sorted([train, val], key=len) == sorted([[*encode(TRICKY * 3), EOT], [*encode(corpus_text[:6000]), EOT]],
                                                   key=len)
    x, y = get_batch(load_split(out, "val", 8), torch.tensor([0]), 8, torch.device("cpu"))  # what train.py reads
    assert x[0].tolist() == val[:8] and y[0].tolist() == val[1:9]
    assert isinstance(load_tokenizer(out), GPT2Tokenizer)
    again = subprocess.run(command, capture_output=True, text=True, env=script_env, timeout=120)
    assert again.returncode == 2 and "--overwrite=True" in again.stderr and "Traceback" not in again.stderr


MEASURE = """
import json, multiprocessing, sys, threading
from text.corpus import CorpusConfig, prepare_corpus

def peak_kilobytes(pid):  # VmHWM restarts at exec; ru_maxrss would count the parent's memory at spawn
    with open(f"/proc/{pid}/status") as status:
        return int(status.read().split("VmHWM:")[1].split()[0])

def watch(peaks, done):
    while not done.wait(0.02):
        for child in multiprocessing.active_children():
            try:
                peaks.append(peak_kilobytes(child.pid))
            except (OSError, IndexError):  # it ended meanwhile
                pass

peaks, done = [0], threading.Event()
watcher = threading.Thread(target=watch, args=(peaks, done))
watcher.start()
prepare_corpus(CorpusConfig(input=sys.argv[1], workers=1, chunk_bytes=1 << 18, progress=False), sys.argv[2])
done.set()
watcher.join()
print(json.dumps([peak_kilobytes("self"), max(peaks)]))
"""


def write_large_corpus(folder: Path, megabytes: float, words: list[str]) -> int:
    """Half in one .txt document, half in .jsonl lines, written a line at a time; returns the bytes written."""
    folder.mkdir()
    draw = random.Random(1)
    with (folder / "book.txt").open("w") as book, (folder / "web.jsonl").open("w") as web:
        while book.tell() + web.tell() < megabytes * 2**20:
            line = " ".join(draw.choices(words, k=40))
            book.write(line + "\n")
            web.write(json.dumps({"text": line}) + "\n")
    return (folder / "book.txt").stat().st_size + (folder / "web.jsonl").stat().st_size


@pytest.mark.gpt2_bpe
@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; ru_maxrss is in kilobytes on Linux only")
def test_peak_memory_stays_flat_as_the_corpus_grows(tmp_path, corpus_text, script_env):
    """Main process and worker, each: the peak resident memory for a 4x larger corpus grows by under 3 MB, though
    the corpus grows by 9 MB (its tokens alone would be 4.5 MB more as uint16)."""
    peaks, sizes = [], []
    for megabytes in (3, 12):
        sizes.append(write_large_corpus(tmp_path / f"c{megabytes}", megabytes, corpus_text.split()))
        result = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / f"c{megabytes}"),
                                 str(tmp_path / f"out{megabytes}")], capture_output=True, text=True, env=script_env,
                                timeout=300)
        assert result.returncode == 0, result.stderr
        peaks.append(json.loads(result.stdout))
        assert read_streams(tmp_path / f"out{megabytes}")[0]["train_tokens"] > sizes[-1] / 6
    assert sizes[1] - sizes[0] > 9 * 2**20
    assert all(worker > 10_000 for _, worker in peaks)  # the watcher saw the worker
    for small, large in zip(*peaks, strict=True):
        assert large - small < 3 * 1024, peaks  # kilobytes


# ---- long lines, the test split, a learned BPE ----------------------------------------------------------------


def test_a_file_without_newlines_is_read_in_bounded_memory(tmp_path):
    """20 MB on one line: the pieces stay near chunk_bytes, and the reader's peak Python memory is a few pieces
    (a buffer grown by concatenation held the whole line, twice, at its peak)."""
    import tracemalloc

    words = TRICKY.replace("\n", " ").encode()
    with (tmp_path / "line.txt").open("wb") as file:
        for _ in range(20 * 2**20 // len(words)):
            file.write(words)
    size = (tmp_path / "line.txt").stat().st_size
    tracemalloc.start()
    try:
        longest, total = 0, 0
        for _, piece_bytes in text_pieces(tmp_path / "line.txt", 1 << 18):
            longest, total = max(longest, piece_bytes), total + piece_bytes
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == size > 20 * 2**20 - len(words)
    assert peak < 8 * 2**20, peak  # the pieces, their text, the read block: well under half the 20 MB line
    assert longest < 2 << 18


@pytest.mark.gpt2_bpe
@pytest.mark.parametrize("chunk_bytes", [1, 7, 64])
def test_pieces_of_a_text_without_newlines_encode_to_the_tokens_of_the_whole(tmp_path, chunk_bytes):
    text = TRICKY.replace("\n", " ").replace("\r", " ") * 3
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    pieces = list(text_pieces(tmp_path / "t.txt", chunk_bytes))
    assert len(pieces) > 5 and "".join(piece for piece, _ in pieces) == text
    assert [t for piece, _ in pieces for t in encode(piece)] == encode(text)


def test_a_word_longer_than_any_cut_is_cut_at_a_character_start(tmp_path):
    from text.cuts import MIN_FORCED_CUT

    text = "é" * MIN_FORCED_CUT  # no newline, no space: 2 bytes a character
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    pieces = list(text_pieces(tmp_path / "t.txt", 1000))
    assert "".join(piece for piece, _ in pieces) == text
    assert len(pieces) >= 2 and max(size for _, size in pieces) <= MIN_FORCED_CUT + 1000


@pytest.mark.gpt2_bpe
def test_the_test_split_leaves_val_as_it_was_and_is_recorded(tmp_path, corpus_text):
    from text.dataset import split_difference, split_identity

    documents = write_corpus(tmp_path / "corpus", corpus_text)
    common = dict(input=str(tmp_path / "corpus"), val_fraction=0.2, workers=1, progress=False)
    without = prepare_corpus(CorpusConfig(**common, test_fraction=0.0), tmp_path / "without")
    with_test = prepare_corpus(CorpusConfig(**common, test_fraction=0.3), tmp_path / "with")
    assert read_streams(tmp_path / "without")[2] == read_streams(tmp_path / "with")[2]  # the same val documents
    test = np.fromfile(tmp_path / "with" / "test.bin", dtype=np.uint16).tolist()
    test_docs = documents_of(test)
    assert 5 <= with_test["test_documents"] == len(test_docs) <= 35  # 62 documents at 0.3: a 1-in-1000 range
    assert all(doc in [encode(text) for text in documents] for doc in test_docs)
    assert with_test["train_documents"] + with_test["test_documents"] == without["train_documents"]
    assert without["test_tokens"] == 0 and (tmp_path / "without" / "test.bin").stat().st_size == 0
    identity = split_identity(with_test)
    assert identity["sha256"]["test"] == hashlib.sha256(np.array(test, dtype=np.uint16).tobytes()).hexdigest()
    assert identity["test_fraction"] == 0.3 and identity["seed"] == 1337 and identity["test_tokens"] == len(test)
    assert "test_fraction 0.0 before, 0.3 now" in split_difference(without, with_test)
    assert split_difference(with_test, json.loads((tmp_path / "with" / "tokenizer.json").read_text())) is None


def test_a_learned_bpe_from_the_training_documents_alone(tmp_path, corpus_text):
    from text.bpe_train import TokenizerConfig
    from text.corpus import draw_split
    from text.tokenizer import BPETokenizer

    documents = write_corpus(tmp_path / "corpus", corpus_text)
    config = CorpusConfig(input=str(tmp_path / "corpus"), val_fraction=0.25, workers=2, chunk_bytes=512,
                          progress=False)
    draw = random.Random(config.seed)
    splits = [draw_split(draw, config) for _ in documents]  # CORPUS_RULE, one draw per document in file order
    description = prepare_corpus(config, tmp_path / "out", TokenizerConfig(tokenizer="bpe", vocab_size=400))
    tokenizer = load_tokenizer(tmp_path / "out")
    assert isinstance(tokenizer, BPETokenizer) and description["vocab_size"] == 400
    _, train, val = read_streams(tmp_path / "out")
    for split, stream in (("train", train), ("val", val)):  # each document encoded whole, then end-of-text
        assert stream == [t for text, s in zip(documents, splits, strict=True) if s == split
                          for t in [*tokenizer.encode_documents(text).tolist(), tokenizer.eot_token]]
    # A val document changed (in its .jsonl line): the merges and the train tokens stay the same.
    changed = next(text for text, s in zip(documents[2:], splits[2:], strict=True) if s == "val")
    d = tmp_path / "corpus" / "b" / "d.jsonl"
    d.write_text(d.read_text().replace(json.dumps(changed), json.dumps(changed.upper()[::-1])))
    prepare_corpus(config, tmp_path / "again", TokenizerConfig(tokenizer="bpe", vocab_size=400))
    assert load_tokenizer(tmp_path / "again").tokens == tokenizer.tokens
    assert read_streams(tmp_path / "again")[1] == train and read_streams(tmp_path / "again")[2] != val


def test_a_char_corpus_has_every_character_and_end_of_text_after_each_document(tmp_path, corpus_text):
    from text.bpe_train import TokenizerConfig
    from text.tokenizer import CharTokenizer, from_description, token_byte_counts

    documents = write_corpus(tmp_path / "corpus", corpus_text)
    config = CorpusConfig(input=str(tmp_path / "corpus"), val_fraction=0.25, workers=1, chunk_bytes=512,
                          progress=False)
    description = prepare_corpus(config, tmp_path / "out", TokenizerConfig(tokenizer="char"))
    chars = sorted(set("".join(documents)))
    assert description["chars"] == "".join(chars) and description["vocab_size"] == len(chars) + 1
    tokenizer = load_tokenizer(tmp_path / "out")
    assert isinstance(tokenizer, CharTokenizer) and tokenizer.eot_token == len(chars)
    assert from_description(tokenizer.description()).eot_token == len(chars)
    assert token_byte_counts(tokenizer)[-1] == 0
    _, train, val = read_streams(tmp_path / "out")
    test = np.fromfile(tmp_path / "out" / "test.bin", dtype=np.uint16).tolist()
    streams = sorted(train + val + test)  # every document's characters by hand, each followed by end-of-text
    assert streams == sorted([chars.index(c) for text in documents for c in text] + [len(chars)] * len(documents))
    assert tokenizer.decode(val).count("<|endoftext|>") == description["val_documents"]
