"""What bench.py measures, one module per benchmark: training, decoding (and the frozen step), tokenizers."""
