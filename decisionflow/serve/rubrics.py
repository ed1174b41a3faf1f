"""The native rubric route: `POST /v1/rubrics/{name}/decide`, a served rubric by name.

`{"text": input}` answers exactly what `decisionflow run --json` prints (`value`, `fields`, `stats`);
`{"texts": [input, ...]}` answers `{"results": [...]}`, one such object per input in order, or the
`{"error": {...}}` of an input that could not be decided (the others are still answered). An input is a
string, an object, a conversation or other structured data (the input policy); a number, a boolean, null,
an empty list and a list of strings are refused naming `text` or `texts[i]`. Every input goes through the
shared admission path on its own (`DecisionService.decide_one`) with the rubric's calibration and heads, so
the inputs of one request, and of concurrent requests, share the model's passes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..errors import DataError
from .admission import DecisionService, RequestNote, log_failure, own_failure
from .body import input_shape_problem, request_object
from .refusals import HttpRefusal, Located, field_path, refusal_of
from .settings import Limits

DECIDE_KEYS = ("text", "texts")


def parse_inputs(body: Any, limits: Limits) -> tuple[list[Any], bool]:
    """The request's inputs, and whether it sent one (`text`) rather than a list (`texts`)."""
    body = request_object(body, shape=' ({"text": ...} or {"texts": [...]})', allowed=DECIDE_KEYS)
    if ("text" in body) == ("texts" in body):
        raise Located(DataError("give exactly one of `text` (one input) or `texts` (a list of inputs)"), "text")
    if "text" in body:
        return [body["text"]], True
    texts = body["texts"]
    if not isinstance(texts, list) or not texts:
        raise Located(DataError("`texts` must be a non-empty list of inputs"), "texts")
    if len(texts) > limits.max_texts:
        raise Located(DataError(f"{len(texts)} inputs; at most {limits.max_texts} per request"), "texts")
    if len(texts) > limits.max_queue:
        # More inputs than the queue holds could never be admitted: refused for good, not a retryable 503.
        raise Located(DataError(f"{len(texts)} inputs; at most {limits.max_queue} per request, "
                                f"the most the server's queue holds (max_queue)"), "texts")
    return texts, False


async def decide_named(service: DecisionService, name: str, raw: bytes, note: RequestNote) -> dict[str, Any]:
    entry = service.registry.get(name)
    if entry is None:
        raise HttpRefusal(404, "NotFound", f"no rubric named {name!r}; GET /v1/rubrics lists the rubrics served",
                          field="name")
    note.rubric = name
    payloads, single = await service.off_loop(service.routes.rubric_inputs, raw)
    service.batcher.refuse_if_full(len(payloads))
    fields = ["text"] if single else [field_path("texts", i) for i in range(len(payloads))]

    async def decide(payload: Any, where: str) -> Any:
        what = input_shape_problem(payload)
        if what is not None:
            # What no input is (a number, a boolean, ...); a list of strings in `text` was meant as `texts`.
            hint = "; for several inputs, give `texts`" if single and what.startswith("a list of") else ""
            raise Located(DataError(f"an input must be a string, an object or a list (a conversation of "
                                    f"{{role, content}} messages, or structured data), got {what}{hint}"), where)
        return await service.decide_one(("rubric", name), entry.rubric, entry.calibration, entry.heads, payload,
                                        where, note)

    outcomes = await asyncio.gather(*(decide(payload, where) for payload, where in zip(payloads, fields)),
                                    return_exceptions=True)
    if single:
        if isinstance(outcomes[0], BaseException):
            raise outcomes[0]
        return outcomes[0].to_dict()
    results = []
    for outcome in outcomes:
        if isinstance(outcome, asyncio.CancelledError):
            raise outcome
        if isinstance(outcome, BaseException):
            refusal = refusal_of(outcome, retry_after_s=service.limits.retry_after_s)
            failure = own_failure(outcome, refusal)
            if failure is not None:
                log_failure(note, failure, "an input of the request failed")
            results.append(refusal.body())
        else:
            results.append(outcome.to_dict())
    return {"results": results}
