"""A corpus larger than memory, GPT-2 BPE tokens (tiktoken): a folder or glob of .txt files (one document each)
and .jsonl files (one document per line, its text under --text_field), tokenized by several processes.

    python data/corpus/prepare.py --input=/data/web --workers=8
    python data/corpus/prepare.py --input='/data/web/*.jsonl' --text_field=content --out_dir=/data/web-tokens
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from corpus import CorpusConfig, prepare_corpus  # noqa: E402
from errors import main_guard
from options import parse_options  # noqa: E402

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> None:
    (config,) = parse_options(argv, (CorpusConfig,), prog="data/corpus/prepare.py", description=__doc__)
    out_dir = Path(config.out_dir) if config.out_dir else HERE
    description = prepare_corpus(config, out_dir)
    print(f"{out_dir}: train {description['train_tokens']:,} tokens ({description['train_documents']:,} documents), "
          f"val {description['val_tokens']:,} tokens ({description['val_documents']:,} documents)")


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
