"""The training loop's parts (train.py runs the loop): the learning-rate schedule, batches, checkpoints, the run
folder, devices and dtypes, data parallelism, the memory model, and nanoGPT's checkpoints."""
