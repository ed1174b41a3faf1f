"""The engine as a Ray Data actor: the model loads once per actor, and each batch is one `decide_each`.

`map_batches` hands an actor a batch of rows; the engine packs them into shared forward passes (up
to its token budget per pass), so packing happens inside each actor's batches and nothing here
schedules work. The class is plain Python: Ray pickles it with its constructor arguments and builds
one instance per actor.

A row that cannot be decided comes back with its `error`, never failing the batch. When something
other than a `DecisionflowError` fails a whole batch (the device out of memory, say), the batch's
rows are decided one at a time, so only the culprit fails; errors that concern the whole rubric (a
calibration, heads or adapter file that does not fit it or the model) still fail the run, since no row could
succeed.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping

from ..errors import DecisionflowError

ID_OUT = "id"
RESULT_OUT = "result"
"""The decision as `decisionflow run --json` prints it, as a JSON string; null when the row failed."""
ERROR_OUT = "error"
"""Why the row could not be decided; null when it was."""

log = logging.getLogger("decisionflow.scale")


def output_schema() -> Any:
    import pyarrow

    return pyarrow.schema([(ID_OUT, pyarrow.string()), (RESULT_OUT, pyarrow.string()), (ERROR_OUT, pyarrow.string())])


class DecisionActor:
    """Decides batches of rows of one rubric; construct it through `map_batches(DecisionActor, ...)`."""

    def __init__(
        self,
        target: Any,
        *,
        text_column: str,
        id_column: str,
        payload_is_json: bool = False,
        calibration: Any = None,
        heads: Any = None,
        adapter: Any = None,
        engine: Mapping[str, Any] | None = None,
        threads: int | None = None,
    ) -> None:
        from transformers.utils import logging as transformers_logging

        from ..runtime.engine import Engine

        transformers_logging.disable_progress_bar()  # one bar per actor would flood the driver's log
        # Unset options (None) take the engine's own defaults: device and dtype `auto`.
        engine_arguments = {key: value for key, value in (engine or {}).items() if value is not None or key == "model"}
        # The adapter travels as its weights (it is pickled with the actor's arguments), so workers need not see its file.
        self.engine = Engine.load(threads=threads, adapter=adapter, **engine_arguments)
        self.target = target
        self.calibration = calibration
        self.heads = heads
        self.text_column = text_column
        self.id_column = id_column
        self.payload_is_json = payload_is_json

    def __call__(self, batch: Mapping[str, Any]) -> Any:
        ids = [str(plain(value)) for value in batch[self.id_column]]
        payloads = [self._payload(value) for value in batch[self.text_column]]
        outcomes = self._decide(payloads)
        results: list[str | None] = []
        errors: list[str | None] = []
        for outcome in outcomes:
            if isinstance(outcome, DecisionflowError):
                outcome.input_index = None  # the row's id names it
                results.append(None)
                errors.append(str(outcome))
            elif isinstance(outcome, Exception):
                results.append(None)
                errors.append(f"the engine failed on this row: {type(outcome).__name__}: {outcome}")
            else:
                results.append(json.dumps(outcome.to_dict(), ensure_ascii=False))
                errors.append(None)
        # Typed columns: a batch without a single error must still have a string `error` column (of nulls),
        # not a null-typed one that numpy batches read back as NaN.
        import pyarrow

        return pyarrow.table({ID_OUT: ids, RESULT_OUT: results, ERROR_OUT: errors}, schema=output_schema())

    def _decide(self, payloads: list[Any]) -> list[Any]:
        """Per row, its decision or its error; a batch that fails as a whole is retried one row at a time."""
        try:
            return self.engine.decide_each(self.target, payloads, calibration=self.calibration, heads=self.heads)
        except DecisionflowError:
            raise  # the rubric, calibration or heads do not fit: every row would fail the same way
        except Exception as error:  # noqa: BLE001 - one row's failure must not cost the batch
            if len(payloads) == 1:
                log.exception("deciding a row failed")
                return [error]
            log.warning("a batch of %d rows failed (%s: %s); deciding its rows one at a time",
                        len(payloads), type(error).__name__, error)
        outcomes: list[Any] = []
        for payload in payloads:
            outcomes.extend(self._decide([payload]))
        return outcomes

    def _payload(self, value: Any) -> Any:
        value = plain(value)
        return json.loads(value) if self.payload_is_json else value


def plain(value: Any) -> Any:
    """A batch cell as plain Python: numpy arrays become lists and numpy scalars Python numbers."""
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        value = value.tolist()
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value
