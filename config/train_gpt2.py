# GPT-2 (124M) from scratch on BPE data, nanoGPT's recipe: ~0.5M tokens per step over 8 GPUs.
# torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py --dataset=YOUR_PREPARED_BPE_FOLDER
out_dir = "out-gpt2"
dataset = "shakespeare"
wandb_log = False
wandb_project = "owt"
wandb_run_name = "gpt2-124M"

# 12 sequences * 1024 tokens * 40 accumulation steps = 491,520 tokens per step, over all processes
batch_size = 12
block_size = 1024
gradient_accumulation_steps = 5 * 8

n_layer = 12
n_head = 12
n_embd = 768
dropout = 0.0

max_iters = 600000
lr_decay_iters = 600000
eval_interval = 1000
eval_iters = 200
log_interval = 10
weight_decay = 1e-1
