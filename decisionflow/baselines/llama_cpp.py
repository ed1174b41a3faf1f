"""llama.cpp on the same GGUF file, generating the rubric's JSON under the rubric's JSON schema as a grammar.

What a CPU user reaches for first: llama.cpp reads the very file decisionflow bundles, multiplies in its
own quantised format with hand-written kernels, and constrains generation with a grammar compiled from
a JSON schema. Run through `llama-cpp-python` (`pip install 'decisionflow[llamacpp]'`; it compiles
llama.cpp from source, minutes on two cores), as a user's code would: greedy, its prompt cache on (the
state after each call is kept in memory and the longest cached prefix of the next prompt restored, so the
rubric's prefix is not prefilled again).

The prompt is decisionflow's own token for token (the model's chat template around the rubric's system
turn and the input, `grammar._prompt_without_opener`): the grammar has the model write the `{`. llama.cpp's
bare prefill of that whole prompt, with nothing cached, is measured beside it as a second floor.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Unavailable
from ..runtime.model.loading import bundled_gguf, cpu_flags
from ..spec.rubric import Rubric
from .generation import MethodResult, canonical_object_tokens, parse_answer
from .grammar import _prompt_without_opener, json_schema

if TYPE_CHECKING:
    from ..runtime.engine import Engine

CACHE_BYTES = 2 << 30
"""The prompt cache's capacity: the prefix states of every bench workload at once."""


def gguf_file(engine: Engine) -> Path:
    """The GGUF file the engine's model was loaded from; `Unavailable` for a model that came from elsewhere."""
    name = str(getattr(engine.loaded, "name", "") or "")
    if name.startswith("bundled:"):
        return bundled_gguf()
    if name.lower().endswith(".gguf") and Path(name).is_file():
        return Path(name)
    raise Unavailable(f"llama.cpp reads GGUF files; the model was loaded from {name or 'an unnamed source'}")


@contextlib.contextmanager
def _extra_buffer_types(llama_cpp: Any, allowed: bool) -> Iterator[None]:
    """Load a model with llama.cpp's extra weight buffer types (the AMX and repacked layouts) on or off.

    llama-cpp-python 0.3.36, built from source on a Xeon with AMX, crashes (a segmentation fault in
    `llama_decode`) on the bundled Q4_1 file with them on, and has no argument for the model parameter
    that turns them off: the default parameters it starts from are given `use_extra_bufts=False` while
    the model loads."""
    if allowed:
        yield
        return
    module = llama_cpp.llama_cpp
    original = module.llama_model_default_params

    def without_extra_buffers() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    module.llama_model_default_params = without_extra_buffers
    try:
        yield
    finally:
        module.llama_model_default_params = original


class LlamaCpp:
    """llama.cpp's greedy, grammar-constrained generation of the rubric's JSON from decisionflow's prompt."""

    def __init__(self, engine: Engine, *, threads: int | None = None, context: int = 4096):
        try:
            import llama_cpp
        except ImportError as exc:
            raise Unavailable(f"llama-cpp-python is not installed ({exc}); pip install 'decisionflow[llamacpp]' "
                              "(it compiles llama.cpp from source)") from None
        import torch

        self.engine = engine
        self.path = gguf_file(engine)
        self.module = llama_cpp
        self.threads = threads or torch.get_num_threads()
        self.extra_buffers = "amx_tile" not in cpu_flags()
        with _extra_buffer_types(llama_cpp, self.extra_buffers):
            self.llama = llama_cpp.Llama(model_path=str(self.path), n_ctx=context, n_threads=self.threads,
                                         n_threads_batch=self.threads, verbose=False)
        self.llama.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=CACHE_BYTES))
        self._grammars: dict[str, Any] = {}

    @property
    def version(self) -> str:
        return str(getattr(self.module, "__version__", "unknown"))

    def grammar(self, rubric: Rubric) -> Any:
        """The rubric's JSON schema compiled to a llama.cpp grammar (kept per rubric, out of the timings)."""
        key = rubric.key
        if key not in self._grammars:
            self._grammars[key] = self.module.LlamaGrammar.from_json_schema(json.dumps(json_schema(rubric)), verbose=False)
        return self._grammars[key]

    def prompt(self, target: Any, payload: Any) -> tuple[Any, list[int]]:
        compiled, _ = self.engine.compile(target)
        return compiled, _prompt_without_opener(compiled, payload)

    def __call__(self, target: Any, payload: Any) -> MethodResult:
        compiled, prompt_ids = self.prompt(target, payload)
        grammar = self.grammar(compiled.rubric)
        # Room for the layout the grammar allows (it lets the model choose its whitespace) beside the answers.
        cap = 2 * canonical_object_tokens(compiled) + 8
        began = time.perf_counter()
        completion = self.llama.create_completion(prompt=prompt_ids, grammar=grammar, max_tokens=cap, temperature=0.0)
        elapsed = (time.perf_counter() - began) * 1000
        choice = completion["choices"][0]
        text = choice["text"]
        generated = int(completion["usage"]["completion_tokens"])
        if choice.get("finish_reason") == "length":
            valid, values, reason = False, None, f"hit the cap of {cap} new tokens before the object closed"
        else:
            valid, values, reason = parse_answer(compiled.rubric, text)
        return MethodResult(
            method="llama_cpp", valid=valid, values=values, forward_passes=generated + 1, prompt_tokens=len(prompt_ids),
            generated_tokens=generated, latency_ms=elapsed, text=text, reason=reason,
            extra={"llama_cpp": self.version, "gguf": self.path.name, "extra_buffer_types": self.extra_buffers},
        )

    def prefill(self, target: Any, payload: Any) -> float:
        """Milliseconds llama.cpp takes to prefill the whole prompt with nothing cached (its own floor)."""
        _, prompt_ids = self.prompt(target, payload)
        self.llama.reset()  # the next eval drops every cached position from 0 on
        began = time.perf_counter()
        self.llama.eval(prompt_ids)
        elapsed = (time.perf_counter() - began) * 1000
        self.llama.reset()
        return elapsed
