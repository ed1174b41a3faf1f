"""The engine behind other frameworks' standard interfaces, answered in process (no server between them).

`decisionflow.integrations.langchain.DecisionflowDecisions` is a LangChain decision model
(`langchain_core.decisions.BaseDecisionModel`). Each framework is an optional dependency (LangChain:
`decisionflow[clients]`), imported only when its integration is asked for, so importing this package
costs nothing.
"""

from typing import Any

__all__ = ["DecisionflowDecisions"]


def __getattr__(name: str) -> Any:
    if name == "DecisionflowDecisions":
        from .langchain import DecisionflowDecisions

        return DecisionflowDecisions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
