"""The usual ways to get a rubric's answers from the same model, which decisionflow is compared with.

`generation` (plain greedy JSON, also scored by `decisionflow eval --baseline`), `grammar`
(XGrammar-constrained generation), `prefill` (per-field prefill and copied prefix caches) and `pcd`
(the original parallel-constrained-decoding engine). Each method takes the engine (for its loaded
model, tokenizer and compiled rubric), a target and one input, and returns a `MethodResult`. The
generation methods read the answer only by parsing text, without repair: an output is valid only
if it is a JSON object with every required key and only allowed values.
"""
