"""Model files the app ships (in the repository or a wheel): used only if they match their pinned sha256."""

import hashlib
import json
from pathlib import Path

import numpy as np


class WeightsError(RuntimeError):
    """A pinned model file is missing, or is not the file that was pinned."""


def sha256_of(path):
    """The hex sha256 of a file, read in 1 MiB chunks (pinned model files are checked with it)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_npz(path, sha256, retrain):
    """(arrays, meta, digest) of a pinned .npz whose 'meta' holds JSON; `retrain` names the command that rebuilds it."""
    path = Path(path)
    if not path.exists():
        raise WeightsError(f"{path} is missing; retrain with `python manage.py {retrain}`")
    digest = sha256_of(path)
    if sha256 is not None and digest != sha256:
        raise WeightsError(f"{path} does not match its pinned sha256; refusing to load it")
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    return arrays, json.loads(bytes(arrays.pop("meta")).decode()), digest
