"""Deciding a Ray Dataset: an actor pool of engines mapped over its rows by Ray Data.

    import ray
    from decisionflow.scale import RayOptions, decide_dataset

    rows = ray.data.read_parquet("s3://bucket/tickets/")          # any Dataset with an id and a text column
    decided = decide_dataset(rows, "workflows/support_triage.yaml", RayOptions(num_actors=8))
    decided.write_parquet("s3://bucket/decided/")                 # columns: id, result (JSON), error

Ray Data streams the rows, sizes the blocks and feeds the actors; the engine packs each actor's batch
into shared forward passes. On a cluster with GPUs every actor takes one GPU (unless told otherwise).
"""

from __future__ import annotations

import logging
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Unavailable
from ..spec.declare import is_decision
from ..spec.references import resolve_target
from .actor import DecisionActor

# The module name `decisionflow.spec.references` gives a Python file it imports (`file.py:Class`).
FILE_MODULE_PREFIX = "_decisionflow_file_"


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None
    """The cluster to join (`host:port`, `ray://host:port`); None: this process's, `RAY_ADDRESS`, the one last
    started on this machine with `ray start`, or a new local one (Ray's own rules)."""
    num_actors: int = 1
    """Engine actors in the pool; each loads the model once."""
    batch_size: int = 32
    """Rows per actor call; the engine packs them into shared passes up to its token budget."""
    cpus_per_actor: float = 1.0
    """CPUs each actor reserves; torch in the actor uses that many threads."""
    gpus_per_actor: float | None = None
    """None: one GPU per actor when the cluster has GPUs, else none."""
    memory_per_actor: int | None = None
    """Bytes of memory each actor reserves for scheduling (None: no reservation)."""
    model: str | None = None
    """What `Engine.load` takes: None for the bundled model, a folder or .gguf path every node can read, or a hub id."""
    device: str | None = None
    """None: `cuda` for actors that hold a GPU, else the engine's default (`auto`)."""
    dtype: str | None = None
    """None: the engine's default (`auto`: bfloat16 on CUDA and on a CPU with native bfloat16, else float32;
    `$DECISIONFLOW_DTYPE` over both)."""
    mode: str = "branch"
    pin_first: bool | None = None
    loader: str | None = None
    """None: the engine's default (`auto`: its own decoder where it reproduces the checkpoint exactly)."""
    max_restarts: int = 2
    """Times Ray restarts an engine actor whose process died (Ray Data's own default is forever)."""
    max_task_retries: int = 2
    """Times a batch that was running on a dying actor is retried on its restart (Ray Data's default: forever)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise Unavailable("the Ray engine needs Ray Data: pip install 'decisionflow[ray]'") from None
    return ray


def connect(options: RayOptions) -> bool:
    """Join (or start) a Ray cluster unless this process already has; True when this call started the connection."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    ray.init(address=options.address, include_dashboard=False, logging_level=logging.WARNING)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the caller shows its own progress
    context.print_on_execution_start = False
    return True


def decide_dataset(
    dataset: Any,
    target: Any,
    options: RayOptions | None = None,
    *,
    text_column: str = "text",
    id_column: str = "id",
    calibration: Any = None,
    heads: Any = None,
    adapter: Any = None,
    payload_is_json: bool = False,
) -> Any:
    """Map `dataset` through an actor pool of engines: a Dataset of `id`, `result` (JSON) and `error` columns.

    `target` is a decorated class, a `Rubric`, or a reference the CLI takes (a YAML path is read here,
    on the driver, so the workers need not see the file). Every row needs an id: they pass through as
    strings, one output row per input row. `payload_is_json`: the text column holds JSON-encoded
    inputs (strings, objects or conversations), as `decide_file_on_ray` writes them. `adapter`: a tuned
    LoRA adapter (`runtime.adapter.Adapter`, or the path of its file, read here on the driver) every actor merges
    into its model, as `Engine.load(adapter=...)` does.
    """
    options = options or RayOptions()
    ray = import_ray()
    connect(options)
    target = resolve_target(target) if isinstance(target, str) else target
    if isinstance(adapter, (str, Path)):
        from ..runtime.adapter import Adapter

        adapter = Adapter.load(adapter)
    _pickle_class_by_value(ray, target)
    gpus = options.gpus_per_actor
    if gpus is None:
        gpus = 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0
    engine = {
        "model": options.model, "mode": options.mode, "pin_first": options.pin_first, "dtype": options.dtype,
        "device": options.device or ("cuda" if gpus > 0 else None), "loader": options.loader,
    }
    with warnings.catch_warnings():
        # Ray 2.60 deprecates remote options passed as extra keywords, yet names no parameter for an actor's
        # restarts and retries, which bound a crashing actor (`actor_remote_args`); the `ray` extra stays
        # below the version that removes them.
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        return dataset.map_batches(
            DecisionActor,
            fn_constructor_args=(target,),
            fn_constructor_kwargs={
                "text_column": text_column, "id_column": id_column, "payload_is_json": payload_is_json,
                "calibration": calibration, "heads": heads, "adapter": adapter, "engine": engine, "threads": max(1, int(options.cpus_per_actor)),
            },
            compute=ray.data.ActorPoolStrategy(size=options.num_actors),
            batch_size=options.batch_size,
            batch_format="numpy",
            num_cpus=options.cpus_per_actor,
            num_gpus=gpus,
            **actor_remote_args(options),
        )


def actor_remote_args(options: RayOptions) -> dict[str, Any]:
    """What each engine actor is created with besides its CPUs and GPUs. Restarts and retries are
    bounded: a process that keeps dying (out of memory, a crashing driver) ends the run with an error
    after a few tries instead of being restarted forever, Ray Data's own default."""
    remote: dict[str, Any] = {"max_restarts": options.max_restarts, "max_task_retries": options.max_task_retries}
    if options.memory_per_actor:
        remote["memory"] = options.memory_per_actor
    return remote


def _pickle_class_by_value(ray: Any, target: Any) -> None:
    """A decorated class read from a file (`path/to/rubrics.py:Triage`) lives in a module the workers
    cannot import by name: ship the module's definitions instead of a reference to them. (A class in
    an importable module is sent by reference: that module must be importable on every node.)"""
    if not is_decision(target):
        return
    module = sys.modules.get(target.__module__)
    if module is not None and module.__name__.startswith(FILE_MODULE_PREFIX):
        ray.cloudpickle.register_pickle_by_value(module)
