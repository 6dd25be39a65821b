"""The supervisor's tools for model APIs and agent frameworks.

Above: agents. Below: the client stubs (``supervisor.client.blocking``, ``supervisor.client.aio``).

- ``supervisor.adapters.formats``: tools in OpenAI's and Anthropic's formats, and a call's outcome
  as Anthropic's ``tool_result`` block or OpenAI's ``tool`` message (pure functions; the stubs'
  ``openai_tools()`` and ``anthropic_tools()`` use them).
- ``supervisor.adapters.toolset``: ``ToolRegistry`` and ``AsyncToolRegistry``, the tools as
  definitions with a call function, following the live registry (framework-free).
- ``supervisor.adapters.langchain``: ``SupervisorToolkit``, the tools as LangChain tools. It needs
  the ``langchain`` extra, and is the only module that imports LangChain: import it by its name.
"""

from supervisor.adapters.formats import (
    anthropic_tool,
    anthropic_tool_result,
    openai_tool,
    openai_tool_message,
)
from supervisor.adapters.toolset import AsyncToolRegistry, ToolDefinition, ToolRegistry

__all__ = [
    "AsyncToolRegistry",
    "ToolDefinition",
    "ToolRegistry",
    "anthropic_tool",
    "anthropic_tool_result",
    "openai_tool",
    "openai_tool_message",
]
