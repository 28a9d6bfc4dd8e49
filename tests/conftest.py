"""Shared pytest setup: import the flat-layout repo modules, one corpus for every test, and GPT-2's BPE only where
TIKTOKEN_CACHE_DIR holds it (the tests read nothing outside the repository and never download)."""

import os
import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import pytest  # noqa: E402

# The first 30,000 characters of Python 3.11's help topics (pydoc_data.topics, under the PSF license), kept here so
# that every machine tests on the same text: prose and code, blank lines, indentation and a few non-ASCII quotes.
CORPUS = REPO_ROOT / "tests" / "fixtures" / "corpus.txt"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """One worker process per core (pytest-xdist), each test file in one worker, so that a file's module-scope
    fixtures (a trained study, a model) are built once: the suite's one-thread tests used one core of two. Only
    where xdist is loaded (pytest -p no:xdist, or a machine without it, runs in one process) and -n was not given;
    before xdist's own pytest_cmdline_main (a conftest's tryfirst hook runs before a plugin's), which reads them."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if config.option.numprocesses is None:
        config.option.numprocesses = "auto"
    if config.option.dist == "no" and config.option.numprocesses != 0:
        config.option.dist = "loadfile"


def pytest_collection_modifyitems(config, items):
    """Tests marked gpu run only where CUDA is available: CI and laptops skip them, `pytest -m gpu` on a GPU
    machine runs them. Tests marked gpt2_bpe run only where TIKTOKEN_CACHE_DIR is set: tiktoken would download
    GPT-2's BPE files otherwise, and the tests never touch the network."""
    import torch

    skips = {"gpu": None if torch.cuda.is_available() else "needs a CUDA GPU",
             "gpt2_bpe": None if os.environ.get("TIKTOKEN_CACHE_DIR") else
             "needs GPT-2's BPE files: set TIKTOKEN_CACHE_DIR to a folder of tiktoken's cache that holds them"}
    for item in items:
        for marker, reason in skips.items():
            if reason and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Tiny tensors run fastest on one thread: on a busy 2-core machine, two OpenMP threads waiting on each other
    made a LayerNorm of a (2, 5, 32) tensor take 8 ms instead of 10 us (measured). Subprocesses started by the
    tests get OMP_NUM_THREADS=1 (script_env)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tf32_at_start() -> tuple[bool, bool]:
    """torch's TF32 flags as this worker starts (before any fixture of a narrower scope trains)."""
    import torch

    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@pytest.fixture(autouse=True)
def tf32_as_at_start(tf32_at_start):
    """train() on CUDA turns TF32 matmuls on for the whole process (train.py's set_up) and leaves them on: after
    each test the flags are as the worker started, so that a float32 comparison on a GPU (1e-4 against a float64
    forward) does not run in TF32 (~1e-3) because a test, or a module fixture, trained before it in this worker."""
    import torch

    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32_at_start


@pytest.fixture(scope="session")
def corpus_text() -> str:
    """The corpus every test that needs real text reads (CORPUS)."""
    return CORPUS.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def char_data(tmp_path_factory, corpus_text) -> Path:
    """A prepared character-level dataset folder (read-only for the tests: copy it to change it)."""
    from text.dataset import prepare

    folder = tmp_path_factory.mktemp("char_data")
    prepare(corpus_text, folder, "char")
    return folder


@pytest.fixture
def script_env(tmp_path) -> dict:
    """Environment for running the repo's scripts in a subprocess: one thread, the offline tiktoken cache, and
    every HTTP(S) request sent to a closed local port, so that nothing can be downloaded even with network."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT), HTTP_PROXY="http://127.0.0.1:9",
               HTTPS_PROXY="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9",
               HF_HUB_OFFLINE="1", WANDB_MODE="offline", WANDB_DIR=str(tmp_path), WANDB_CACHE_DIR=str(tmp_path),
               WANDB_CONFIG_DIR=str(tmp_path), WANDB_DATA_DIR=str(tmp_path))
    for name in ("NO_PROXY", "no_proxy", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


# Runs a script (argv[1], its arguments after it) so that dist.destroy_process_group() fails unless it also ended
# the process group's gloo threads: a gloo thread that outlives it aborts the process at exit or deadlocks it, but
# only now and then (see parallel.end_processes); this makes that certain to show.
ENDS_ITS_THREADS = '''
import os, runpy, sys, time
import torch.distributed as dist


def gloo_threads() -> list[str]:
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            names.append(open(f"/proc/self/task/{task}/comm").read().strip())
        except FileNotFoundError:  # ended while listed
            pass
    return [name for name in names if "gloo" in name]


def destroy_process_group(*args, destroy=dist.destroy_process_group, **kwargs):
    destroy(*args, **kwargs)
    deadline = time.monotonic() + 5  # a joined thread can stay listed for a moment; one still running, forever
    while gloo_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not gloo_threads(), f"destroy_process_group() left {gloo_threads()} running"


dist.destroy_process_group = destroy_process_group
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


@pytest.fixture
def ends_its_threads(tmp_path) -> Path:
    """A script to give torchrun before the real one: see ENDS_ITS_THREADS."""
    path = tmp_path / "ends_its_threads.py"
    path.write_text(ENDS_ITS_THREADS)
    return path


@pytest.fixture(scope="session")
def trained(tmp_path_factory, corpus_text) -> Path:
    """A finished 4-step run (ckpt.pt, best.pt, metrics.jsonl) and its data, under one folder: trained once for every
    test_*_faults.py (read-only for the tests: run_copy gives each its own copy to damage)."""
    from helpers import flags

    import train as train_module
    from options import parse_options
    from text.dataset import prepare

    root = tmp_path_factory.mktemp("trained")
    prepare(corpus_text[:5000], root / "data", "char")
    config, model_config = parse_options(flags(root / "run", root / "data"),
                                         (train_module.TrainConfig, train_module.GPTConfig), "", "")
    train_module.train(config, model_config)
    return root


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    """A copy of the trained run and its data, to damage; returns the folder holding run/ and data/."""
    shutil.copytree(trained, tmp_path / "copy")
    return tmp_path / "copy"
