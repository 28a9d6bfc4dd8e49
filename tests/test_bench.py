"""bench.py's report: each figure as the median (min-max) over separate processes, a single one marked as such."""

import pytest

import bench
from errors import UserError


def test_spread_over_processes_is_median_min_max():
    processes = [[bench.figure("t", "plain", "tokens/s", rate, "tokens/s"),
                  bench.figure("t", "plain", "vs plain", 1.0, "x")] for rate in (1200.0, 1000.0, 1500.0)]
    processes[1].append(bench.figure("t", "compiled", "tokens/s", 2000.0, "tokens/s"))  # one process only
    table = bench.spread_tables(processes).splitlines()
    assert table[0] == "| t | tokens/s | vs plain |"
    assert table[2] == "| plain | 1,200 (1,000–1,500) | 1.00x (1.00x–1.00x) |"
    assert table[3] == "| compiled | 2,000 (once) |  |"


def test_units_format_as_the_readme_writes_them():
    assert bench.spread_cell([0.0312], "%") == "3.1% (once)"
    assert bench.spread_cell([2.5, 3.5], "ms") == "3.00 ms (2.50 ms–3.50 ms)"


# Non-ASCII on purpose: tokens per byte must count UTF-8 bytes, not characters.
TINY_TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak. Héllo, café 😀\n"
             "You are all resolved rather to die than to famish?\n") * 30


def test_tokenizer_table_counts_tokens_per_utf8_byte(tmp_path, capsys):
    import tiktoken

    from bpe_train import train_hf

    path = tmp_path / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    size = len(path.read_bytes())
    bench.main(["--what=tokenizer", f"--input={path}", "--vocab_sizes=300", "--repeats=1", "--rounds=1"])
    lines = capsys.readouterr().out.splitlines()
    header = lines.index("| tokenizer | time to learn | tiktoken encode | HF's own encode | tokens per byte |")
    rows = {line.split(" | ")[0].removeprefix("| "): line.strip("| ").split(" | ")[1:] for line in lines[header + 2:]
            if line.startswith("|")}
    assert list(rows) == ["bpe 300", "GPT-2 (50,257)"]
    # independent counts: HF's own encoder for the learned BPE, tiktoken's GPT-2 for GPT-2
    bpe_ids = train_hf([TINY_TEXT], 300, size, size, progress=False).encode(TINY_TEXT).ids
    gpt2_ids = tiktoken.get_encoding("gpt2").encode_ordinary(TINY_TEXT)
    assert rows["bpe 300"][0].endswith(" s (once)") and rows["bpe 300"][1].endswith(" MB/s (once)")
    assert rows["bpe 300"][2].endswith(" MB/s (once)") and rows["bpe 300"][3] == f"{len(bpe_ids) / size:.3f} (once)"
    assert rows["GPT-2 (50,257)"][0] == "" and rows["GPT-2 (50,257)"][2] == ""
    assert rows["GPT-2 (50,257)"][3] == f"{len(gpt2_ids) / size:.3f} (once)"
    _, figures = bench.bench_tokenizer(bench.BenchConfig(what="tokenizer", input=str(path), vocab_sizes=[300],
                                                         rounds=1))
    per_byte = {f["row"]: f["value"] for f in figures if f["column"] == "tokens per byte"}
    assert per_byte == {"bpe 300": len(bpe_ids) / size, "GPT-2 (50,257)": len(gpt2_ids) / size}


def test_tokenizer_bad_input_is_refused_before_any_process(tmp_path):
    missing = tmp_path / "missing.txt"
    with pytest.raises(UserError, match="missing.txt' does not exist"):
        bench.main(["--what=tokenizer", f"--input={missing}", "--repeats=3"])
    (tmp_path / "short.txt").write_text("to be or not to be", encoding="utf-8")
    with pytest.raises(UserError, match="vocab_sizes=.*8192 needs 7,935 merges, more than the 18 bytes"):
        bench.main(["--what=tokenizer", f"--input={tmp_path / 'short.txt'}", "--repeats=3"])
