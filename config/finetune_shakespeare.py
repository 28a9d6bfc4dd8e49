# Finetune GPT-2 (124M) on Tiny Shakespeare's BPE tokens, as nanoGPT does. With network init_from = "gpt2"
# downloads the weights; offline, set init_from to a local Hugging Face GPT-2 directory (config.json + weights).
# python data/shakespeare/prepare.py && python train.py config/finetune_shakespeare.py
out_dir = "out-shakespeare-finetune"
dataset = "shakespeare"
init_from = "gpt2"
eval_interval = 5
eval_iters = 40
log_interval = 1

# Tiny Shakespeare has 304,223 train tokens: one epoch is ~9 iterations of 32,768 tokens.
batch_size = 1
gradient_accumulation_steps = 32
block_size = 1024
max_iters = 20

learning_rate = 3e-5
decay_lr = False
dropout = 0.1
