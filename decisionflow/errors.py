"""Errors the engine raises for bad input, unsupported models and rubrics it cannot compile."""


class DecisionflowError(Exception):
    """Base class of every error decisionflow raises on purpose."""


class InputError(DecisionflowError, ValueError):
    """The request's input cannot be decided on (empty, too long for the model, wrong type)."""


class ModelError(DecisionflowError):
    """The model cannot be loaded or cannot serve a rubric correctly."""


class CompileError(DecisionflowError):
    """A rubric cannot be compiled for a tokenizer (e.g. two labels tokenise identically)."""
