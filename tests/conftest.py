"""Shared pytest setup: import the flat-layout repo modules, and use the vendored tiktoken cache (offline)."""

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

_TIKTOKEN_CACHE = REPO_ROOT.parent / "shared" / "tiktoken_cache"
if _TIKTOKEN_CACHE.is_dir():
    # tiktoken downloads its BPE files unless they are in this cache; the tests must never touch the network.
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(_TIKTOKEN_CACHE))
