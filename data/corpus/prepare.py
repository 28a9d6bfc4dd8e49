"""A corpus larger than memory, GPT-2 BPE tokens (tiktoken) or a BPE learned from its training documents: a folder
or glob of .txt files (one document each) and .jsonl files (one document per line, its text under --text_field),
tokenized by several processes.

    python data/corpus/prepare.py --input=/data/web --workers=8
    python data/corpus/prepare.py --input='/data/web/*.jsonl' --text_field=content --out_dir=/data/web-tokens
    python data/corpus/prepare.py --input=/data/web --tokenizer=bpe --vocab_size=8192
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from errors import main_guard  # noqa: E402
from options import parse_options  # noqa: E402
from text.bpe_train import TokenizerConfig  # noqa: E402
from text.corpus import CorpusConfig, prepare_corpus  # noqa: E402

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> None:
    config, tokenizer = parse_options(argv, (CorpusConfig, TokenizerConfig), prog="data/corpus/prepare.py",
                                      description=__doc__)
    out_dir = Path(config.out_dir) if config.out_dir else HERE
    description = prepare_corpus(config, out_dir, tokenizer)
    print(f"{out_dir}: {description['kind']} vocab {description['vocab_size']}, " + ", ".join(
        f"{split} {description[f'{split}_tokens']:,} tokens ({description[f'{split}_documents']:,} documents)"
        for split in ("train", "val", "test")))


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
