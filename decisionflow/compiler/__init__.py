"""Step 2: a rubric and a tokenizer in, the prompt, the JSON layout and every field's token trie out.

Needs a tokenizer, never torch: `decisionflow plan --tokens` runs it without loading a model.
"""

from .compiled import CompiledRubric, compile_rubric, example_answer
from .independent import compile_independent
from .inputs import render_input
from .layout import LAYOUTS, Layout, probe_layout
from .prompt import DEFAULT_CATALOG, Catalog, PromptParts, render_prompt, system_text
from .tokens import TokenizerView
from .trie import CompiledField, ReadMode, TrieNode

__all__ = [
    "DEFAULT_CATALOG", "LAYOUTS", "Catalog", "CompiledField", "CompiledRubric", "Layout", "PromptParts", "ReadMode", "TokenizerView",
    "TrieNode", "compile_independent", "compile_rubric", "example_answer", "probe_layout", "render_input", "render_prompt", "system_text",
]
