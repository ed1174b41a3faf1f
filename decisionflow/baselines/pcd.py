"""pcd-rlcd, the original parallel-constrained-decoding engine, run on the same model for comparison.

Needs `pcd-rlcd` (`pip install --no-deps pcd-rlcd`) and the bundled model's converted folder.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from ..errors import Unavailable
from ..runtime.model.loading import cache_root
from ..spec.rubric import AnswerFormat, FieldKind, Rubric, Value
from .generation import MethodResult, check_value

if TYPE_CHECKING:
    from ..runtime.engine import Engine


def pcd_schema(rubric: Rubric, original: dict[str, Any] | None = None) -> dict[str, Any]:
    """The schema mapping pcd reads: booleans and enums (score levels become enums of their digits)."""
    if original is not None:
        return original
    schema: dict[str, Any] = {}
    for spec in rubric:
        if spec.kind is FieldKind.BOOLEAN:
            schema[spec.name] = {"type": "boolean", "description": spec.question}
        else:
            schema[spec.name] = {"type": "enum", "description": spec.question, "choices": [str(v) for v in spec.values]}
    return schema


class PcdRlcd:
    """pcd-rlcd's torch engine on the CPU, loading the converted copy of the same model.

    pcd builds its own ChatML prompt from the schema and input (catalog of field descriptions only),
    prefills it without prefix caching, then scores every field's first label token in one batch over
    copies of that cache: two passes per request. It reads `MODEL_ID` and `BACKEND` when imported.
    """

    def __init__(self, model_folder: str):
        os.environ["BACKEND"] = "torch"
        os.environ["MODEL_ID"] = model_folder
        try:
            from pcd_rlcd import engine_torch
            from pcd_rlcd.schema import StructuredSchema
        except ImportError as exc:
            raise Unavailable(f"pcd-rlcd is not installed ({exc}); pip install --no-deps pcd-rlcd") from None
        if engine_torch.MODEL_ID != model_folder:
            raise Unavailable(f"pcd-rlcd was already imported with MODEL_ID={engine_torch.MODEL_ID}")
        self.engine_torch = engine_torch
        self.schema_class = StructuredSchema
        self._schemas: dict[str, Any] = {}
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            _, self.tokenizer, _ = engine_torch.get_torch_engine()

    def __call__(self, rubric: Rubric, context: str, *, schema: dict[str, Any] | None = None) -> MethodResult:
        mapping = pcd_schema(rubric, schema)
        key = json.dumps(mapping, sort_keys=True)
        structured = self._schemas.get(key)
        if structured is None:
            structured = self._schemas[key] = self.schema_class(mapping, tokenizer=self.tokenizer)
        began = time.perf_counter()
        output = self.engine_torch.run_parallel_generation_torch(context, structured)
        elapsed = (time.perf_counter() - began) * 1000
        values: dict[str, Value | None] = {}
        for spec in rubric:
            raw = output["parsed_json"][spec.name]["value"]
            values[spec.name] = int(raw) if spec.kind is FieldKind.SCORE else raw
        prompt = (
            f"<|im_start|>system\nClassify JSON attributes:\n{structured.to_parallel_schema_str()}<|im_end|>\n"
            f"<|im_start|>user\n{context}<|im_end|>\n<|im_start|>assistant\n{{\n"
        )
        prompt_tokens = len(self.tokenizer.encode(prompt))
        valid, _, reason = _valid_values(rubric, values)
        return MethodResult(
            "pcd_rlcd", valid, values, 2, prompt_tokens, 0, elapsed, reason=reason,
            extra={"pcd_elapsed_ms": output["elapsed_ms"], "pcd_prefill_ms": output["prefill_ms"]},
        )


def _valid_values(rubric: Rubric, values: dict[str, Value | None]) -> tuple[bool, None, str]:
    for spec in rubric:
        ok, _, reason = check_value(spec, values.get(spec.name), AnswerFormat.LABELS)
        if not ok:
            return False, None, reason
    return True, None, ""


def converted_model_folder(engine: Engine) -> str | None:
    """The HF folder the bundled GGUF model was converted to (what pcd's MODEL_ID can point to)."""
    name = engine.loaded.name
    if not name.startswith("bundled:"):
        return name if os.path.isdir(name) else None
    stem = name.split(":", 1)[1].rsplit(".gguf", 1)[0]
    folders = sorted((cache_root() / "models").glob(f"{stem}-*"))
    folders = [f for f in folders if (f / "config.json").is_file()]
    return str(folders[0]) if folders else None
