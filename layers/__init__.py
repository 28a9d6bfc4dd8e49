"""What model.py is built from, below it: the position encodings (positions.py) and the CPU kernels that are not
the textbook (kernels.py). Neither imports the model."""
