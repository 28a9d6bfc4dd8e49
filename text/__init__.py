"""Text to tokens: tokenizers (loading and learning), datasets and corpora on disk, where a text may be cut,
and nanoGPT's data folders."""
