"""Reading and writing model files by hand, for the tampering tests: the
metadata (JSON) and the arrays of a saved model, and a crafted file from
edited copies of them."""
from __future__ import annotations

import json

import numpy as np


def read_model_file(path) -> tuple[dict, dict]:
    """``(meta, arrays)`` of a model file written by ``save_model``."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return json.loads(arrays.pop("__meta__").tobytes()), arrays


def write_model_file(path, meta: dict, arrays: dict) -> None:
    """A model file holding ``meta`` (as the ``__meta__`` JSON entry) and ``arrays``."""
    np.savez(path, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
