"""Tiny Shakespeare, character level: downloads input.txt when online, or takes --input=PATH."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from text.dataset import download_text, prepare_main  # noqa: E402

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    prepare_main(sys.argv[1:], HERE, "char", lambda: download_text(URL, HERE / "input.txt"), __doc__)
