"""Prefix caches on disk, so a new process does not pay a rubric's prefix prefill again.

A rubric's prefix (system turn, catalog, `Input:`) is identical for every request; its keys and values
cost one forward pass over often thousands of tokens. The store keeps them as safetensors files, and
beside each the rubric's content-free priors (the debiased readout's estimate of the model's bias,
one small decision per content-free input) as a small JSON file, both keyed by everything that
determines them: the prefix's token ids (which already encode the rubric, the
prompt wording, the chat template and the tokenizer), a fingerprint of the model's weights and
configuration, the dtype, and the store's format version. A changed rubric, model or template is
never served a stale prefix: its key is different.

Files are written atomically (a temporary file renamed into place), loaded memory-mapped, touched on
use, and evicted oldest-first once the store exceeds its byte budget. A file that cannot be read, or
does not match the model it is loaded for, is ignored with a `PrefixCacheWarning` and removed.

The engine's store lives in `<cache>/prefixes`; one written before it was named so (`<cache>/heads`, the same
file names and format) is read as a legacy folder: a file found only there is moved over on first use.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from .passes.backend import PrefixCache

FORMAT = 1
"""Bumped whenever the forward pass could compute different keys or values for the same tokens."""
DEFAULT_MAX_BYTES = 4 << 30
FOLDER = "prefixes"
"""The store's folder under the cache root (`Engine.load`)."""
LEGACY_FOLDER = "heads"
"""What that folder was called before: read as a legacy folder beside it (see `PrefixStore`)."""


def legacy_folders(folder: str | os.PathLike) -> tuple[Path, ...]:
    """The legacy folder beside a store folder named `FOLDER` (none for a folder named otherwise)."""
    folder = Path(folder)
    return (folder.parent / LEGACY_FOLDER,) if folder.name == FOLDER else ()


class PrefixCacheWarning(UserWarning):
    """A stored prefix could not be used; it is recomputed."""


HeadCacheWarning = PrefixCacheWarning
"""Deprecated: the earlier name of `PrefixCacheWarning`."""


@functools.cache
def library_version() -> str:
    try:
        return version("decisionflow")
    except PackageNotFoundError:
        return "unknown"


ARCHITECTURE_KEYS = (
    "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps", "hidden_act", "tie_word_embeddings",
    "attention_bias", "mlp_bias",
)


def architecture(config: Any) -> dict[str, Any]:
    """What of a model's configuration changes its keys and values, read alike from a transformers
    config and from the engine's own decoder's (so both loaders of one checkpoint share its prefixes)."""
    from .passes.decoder import rope_settings

    if config is None or not hasattr(config, "to_dict"):
        return {"config": repr(config)}
    getter = getattr(config, "get_text_config", None)
    config = getter() if callable(getter) else config
    values = config.to_dict()
    # A key another family spells otherwise (GPT-2's `n_embd` for `hidden_size`) is read through the
    # configuration's own attribute map.
    found = {key: values[key] if key in values else getattr(config, key, None) for key in ARCHITECTURE_KEYS}
    heads = found["num_attention_heads"]
    found["head_dim"] = found["head_dim"] or (found["hidden_size"] // heads if found["hidden_size"] and heads else None)
    found["num_key_value_heads"] = found["num_key_value_heads"] or heads
    found["rope"] = rope_settings(values)
    return found


def model_fingerprint(model: Any, *, as_bfloat16: bool = False) -> str:
    """A cheap content fingerprint of a model: its configuration and a sample of its weights.

    Hashing every weight would cost seconds; a strided sample of the embedding and every norm's
    weight tells checkpoints apart just as surely for this purpose, in milliseconds.

    `as_bfloat16`: the sample rounded to bfloat16 first, so the same checkpoint loaded in float32 and in
    bfloat16 (rounded to nearest, as loading does) fingerprints alike: what says two engines hold the same
    weights in two number formats (`weights_fingerprint`).
    """
    digest = hashlib.sha256()
    digest.update(json.dumps(architecture(getattr(model, "config", None)), sort_keys=True, default=str).encode())
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    embedding_weight = getattr(embedding, "weight", None)
    for name, tensor in model.named_parameters():
        # Every norm, and the input embedding whatever the family calls it (`embed_tokens`, `embed_in`, `wte`):
        # a freshly initialised model's norms are all ones, its embedding is not.
        if tensor.ndim == 1 or name.endswith("embed_tokens.weight") or tensor is embedding_weight:
            flat = tensor.detach().reshape(-1)
            sample = flat[:: max(1, flat.numel() // 4096)]
            sample = (sample.to(torch.bfloat16) if as_bfloat16 else sample).float().cpu()
            digest.update(name.encode())
            digest.update(sample.numpy().tobytes())
    return digest.hexdigest()


def weights_fingerprint(model: Any) -> str:
    """The model's fingerprint whatever number format it was loaded in (see `model_fingerprint`)."""
    return model_fingerprint(model, as_bfloat16=True)


class PrefixStore:
    """A folder of prefix caches for one model (identified by its fingerprint) and dtype.

    `legacy`: older folders of the same files (the store's earlier name); a file missing here but present
    there is moved here when it is asked for, so a store written before the rename is still used."""

    def __init__(self, folder: str | os.PathLike, *, fingerprint: str, dtype: torch.dtype, max_bytes: int = DEFAULT_MAX_BYTES,
                 legacy: tuple[str | os.PathLike, ...] = ()):
        self.folder = Path(folder)
        self.fingerprint = fingerprint
        self.dtype = dtype
        self.max_bytes = max_bytes
        self.legacy = tuple(Path(old) for old in legacy)

    def key(self, prefix_tokens: tuple[int, ...] | list[int], **more: Any) -> str:
        """The file name's digest: the prefix's tokens, this store's model, dtype and format, and `more`."""
        identity = {
            "format": FORMAT,
            "library": library_version(),
            "model": self.fingerprint,
            "dtype": str(self.dtype),
            "tokens": list(prefix_tokens),
            **more,
        }
        return hashlib.sha256(json.dumps(identity, separators=(",", ":")).encode()).hexdigest()[:32]

    def path(self, prefix_tokens: tuple[int, ...] | list[int]) -> Path:
        return self.folder / f"{self.key(prefix_tokens)}.safetensors"

    def load(self, prefix_tokens: tuple[int, ...] | list[int], *, layers: int, device: torch.device) -> PrefixCache | None:
        """The stored prefix for these tokens, or None (absent, unreadable or not this model's shape)."""
        path = self.path(prefix_tokens)
        if not self._adopt(path):
            return None
        try:
            from safetensors.torch import load_file

            tensors = load_file(path, device=str(device))
            kv = [(tensors[f"k.{i}"], tensors[f"v.{i}"]) for i in range(layers)]
            if len(tensors) != 2 * layers or any(
                k.shape[-2] != len(prefix_tokens) or k.dtype != self.dtype or v.shape != k.shape for k, v in kv
            ):
                raise ValueError("its tensors do not match this model's layers, dtype or prefix length")
            # Damaged bytes in a float file almost always make some value NaN or infinite; a prefix read
            # from such a file would turn every answer into a pick among NaNs.
            if not all(bool(torch.isfinite(t).all()) for pair in kv for t in pair):
                raise ValueError("it holds values that are not finite (the file is damaged)")
        except FileNotFoundError:
            return None  # removed meanwhile by another process sharing the folder
        except Exception as error:  # noqa: BLE001 - a damaged cache file must never fail a request
            warnings.warn(f"ignoring the stored prefix {path.name}: {error}", PrefixCacheWarning, stacklevel=2)
            path.unlink(missing_ok=True)
            return None
        _touch(path)  # recently used: evicted last
        return PrefixCache(kv=kv, length=len(prefix_tokens), tokens=tuple(prefix_tokens))

    def save(self, prefix_tokens: tuple[int, ...] | list[int], prefix: PrefixCache) -> None:
        """Write atomically, then evict the oldest files beyond the byte budget. Failures only warn."""
        from safetensors.torch import save_file

        path = self.path(prefix_tokens)
        tensors = {}
        for i, (k, v) in enumerate(prefix.kv):
            tensors[f"k.{i}"] = k.detach().contiguous().cpu()
            tensors[f"v.{i}"] = v.detach().contiguous().cpu()
        metadata = {"tokens": str(len(prefix_tokens)), "format": str(FORMAT)}
        if self._write_atomically(path, lambda scratch: save_file(tensors, scratch, metadata=metadata)):
            self.evict(keep=path)

    def prior_path(self, prefix_tokens: tuple[int, ...] | list[int], identity: dict[str, Any]) -> Path:
        """Where a rubric's content-free priors live: keyed like its prefix, plus what else shapes them
        (the rubric's rows, the read mode, the content-free inputs)."""
        return self.folder / f"{self.key(prefix_tokens, prior=identity)}.prior.json"

    def load_prior(self, prefix_tokens: tuple[int, ...] | list[int], identity: dict[str, Any]) -> dict[str, tuple[float, ...]] | None:
        """The stored per-field priors, or None (absent, or unreadable and then removed)."""
        path = self.prior_path(prefix_tokens, identity)
        if not self._adopt(path):
            return None
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            priors = {str(name): tuple(float(p) for p in values) for name, values in stored["priors"].items()}
        except FileNotFoundError:
            return None  # removed meanwhile by another process sharing the folder
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            warnings.warn(f"ignoring the stored prior {path.name}: {error}", PrefixCacheWarning, stacklevel=2)
            path.unlink(missing_ok=True)
            return None
        _touch(path)
        return priors

    def save_prior(self, prefix_tokens: tuple[int, ...] | list[int], identity: dict[str, Any],
                   priors: dict[str, tuple[float, ...]]) -> None:
        text = json.dumps({"priors": {name: list(values) for name, values in priors.items()}})
        self._write_atomically(self.prior_path(prefix_tokens, identity),
                               lambda scratch: Path(scratch).write_text(text, encoding="utf-8"))

    def _adopt(self, path: Path) -> bool:
        """Whether `path` is in the store, after moving it over from a legacy folder that holds it. A file
        that cannot be moved (another process took it, a read-only folder) is simply missing: recomputed."""
        if path.is_file():
            return True
        for old in self.legacy:
            source = old / path.name
            if not source.is_file():
                continue
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                os.replace(source, path)
            except OSError:
                continue
            return True
        return path.is_file()

    def _write_atomically(self, path: Path, write: Any) -> bool:
        """`write(scratch)` to a temporary file renamed onto `path`; a failure only warns (False)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, scratch = tempfile.mkstemp(prefix=".store-", suffix=".tmp", dir=self.folder)
            os.close(handle)
            try:
                write(scratch)
                os.replace(scratch, path)
            finally:
                Path(scratch).unlink(missing_ok=True)
        except OSError as error:
            warnings.warn(f"could not store {path.name} in {self.folder}: {error}", PrefixCacheWarning, stacklevel=3)
            return False
        return True

    def evict(self, *, keep: Path | None = None) -> None:
        """Remove the least recently used files beyond the byte budget. Other processes (serving workers,
        Ray actors) may share the folder and remove files meanwhile: a file gone is simply not counted."""
        sizes: list[tuple[float, int, Path]] = []
        for file in [*self.folder.glob("*.safetensors"), *self.folder.glob("*.prior.json")]:
            try:
                status = file.stat()
            except FileNotFoundError:
                continue
            sizes.append((status.st_mtime, status.st_size, file))
        sizes.sort(key=lambda entry: entry[0])
        total = sum(size for _, size, _ in sizes)
        for _, size, file in sizes:
            if total <= self.max_bytes:
                break
            if file == keep:
                continue
            total -= size
            file.unlink(missing_ok=True)


def _touch(path: Path) -> None:
    """Mark a file recently used; another process may have removed it since it was read."""
    try:
        os.utime(path)
    except FileNotFoundError:
        pass
