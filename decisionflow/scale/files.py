"""`decisionflow run --engine ray`: the resumable file run, decided by an actor pool on a Ray cluster.

The driver reads and checks the input file (ids unique, columns present) exactly as the plain run
does, skips the ids its output already holds, and hands the rest to Ray Data as a dataset (the file
is local to the driver, so its rows travel to the workers through the object store; a file on shared
storage is better read by the workers themselves through `decide_dataset`). Results stream back as
the actors finish batches, in whatever order, and are appended to the output through the same
`ResumableOutput` as the plain run: one whole line per row, flushed per batch, so a killed run
resumes with every id exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from ..batch.input_files import read_rows
from ..batch.resumable_jsonl import BatchSummary, OutputIdentity, ResumableOutput
from ..errors import ClusterError, DecisionflowError
from .actor import ERROR_OUT, ID_OUT, RESULT_OUT
from .dataset import RayOptions, connect, decide_dataset, import_ray


def decide_file_on_ray(
    target: Any,
    source: Path,
    output: Path,
    options: RayOptions | None = None,
    *,
    calibration: Any = None,
    heads: Any = None,
    adapter: Any = None,
    text_column: str | None = None,
    id_column: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> BatchSummary:
    """Decide every row of `source` (JSONL, CSV or Parquet) not yet in `output` on Ray, appending one record per row."""
    options = options or RayOptions()
    rows = read_rows(source, text_column=text_column, id_column=id_column)
    ray = import_ray()
    decided = failed = 0
    with ResumableOutput(output, OutputIdentity.of(target), source=Path(source)) as out:
        todo = out.pending(rows, progress)
        # Ids travel through Ray as strings; records carry them with the type the input gave them.
        given_ids = {row.id: row.output_id for row in todo}
        skipped = len(rows) - len(todo)
        if todo:
            started = connect(options)
            try:
                items = [{ID_OUT: row.id, "payload": json.dumps(row.payload, ensure_ascii=False)} for row in todo]
                dataset = ray.data.from_items(items)
                results = decide_dataset(
                    dataset, target, options, text_column="payload", id_column=ID_OUT,
                    calibration=calibration, heads=heads, adapter=adapter, payload_is_json=True,
                )
                try:
                    for batch in results.iter_batches(batch_size=None, batch_format="numpy"):
                        records = list(_records(batch, given_ids))
                        out.write_chunk(records)
                        failed += sum("error" in record for record in records)
                        decided += sum("error" not in record for record in records)
                        if progress:
                            progress(skipped + decided + failed, len(rows))
                except ray.exceptions.RayError as error:
                    raise _cluster_error(error, options, written=decided + failed, output=output) from error
            finally:
                if started:
                    ray.shutdown()
    return BatchSummary(total=len(rows), decided=decided, skipped=skipped, failed=failed, repaired=out.repaired)


def _cluster_error(error: Exception, options: RayOptions, *, written: int, output: Path) -> DecisionflowError:
    """The run's end, said plainly: a DecisionflowError an actor raised keeps its own message; anything
    else (an actor that died past its restarts, a task that failed past its retries) becomes a ClusterError."""
    ray = import_ray()
    seen: BaseException | None = error
    for _ in range(8):  # Ray wraps an actor's exception (RayTaskError, its user-code wrapper) a few levels deep
        if seen is None:
            break
        # Ray's wrapper also subclasses the cause's class (`as_instanceof_cause`): its message is Ray's traceback.
        if isinstance(seen, DecisionflowError) and not isinstance(seen, ray.exceptions.RayError):
            return seen
        seen = getattr(seen, "cause", None) or seen.__cause__
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return ClusterError(
        f"the Ray run stopped ({type(error).__name__}: {first_line}) after at most {options.max_restarts} actor "
        f"restarts and {options.max_task_retries} retries per batch; {written} records written to {output} "
        "are kept, and running the same command again resumes after them"
    )


def _records(batch: dict[str, Any], given_ids: dict[str, str | int]) -> Any:
    for row_id, result, error in zip(batch[ID_OUT], batch[RESULT_OUT], batch[ERROR_OUT]):
        given = given_ids.get(str(row_id), str(row_id))
        if isinstance(result, str):
            yield {"id": given, **json.loads(result)}
        else:
            yield {"id": given, "error": str(error)}
