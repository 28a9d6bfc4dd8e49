"""Python's own documentation, character level: the default corpus, no download needed.

The text is the help topics that ship with every CPython (pydoc_data.topics, what `help("with")` prints):
about 465,000 characters of English prose and code. --input=PATH takes any UTF-8 file instead.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from text.dataset import prepare_main  # noqa: E402

HERE = Path(__file__).resolve().parent


def python_docs_text() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


if __name__ == "__main__":
    prepare_main(sys.argv[1:], HERE, "char", python_docs_text, __doc__)
