"""The agent loop (`Agent`: run -> step -> query -> execute) and sub-agents (`SubAgents`, the `task`
tool). The loop calls `engine.prepare()` before every model call, so compaction can happen inside a
tool loop.

Imports: everything below it (engine, tools, providers, memory); never the edges.
"""

from ctxwin.agent.definitions import AgentDefinition, load_definitions, parse_definition
from ctxwin.agent.events import LoopEvent, RunResult, RunStats
from ctxwin.agent.loop import Agent, AgentConfig, Interrupted, create_agent, tool_schema, tool_table
from ctxwin.agent.model import FunctionModel, HttpModel, Model
from ctxwin.agent.subagents import ChildResult, SubagentLimits, SubAgents
from ctxwin.agent.tree import Cancel

__all__ = ["Agent", "AgentConfig", "AgentDefinition", "Cancel", "ChildResult", "FunctionModel", "HttpModel",
           "Interrupted", "LoopEvent", "Model", "RunResult", "RunStats", "SubAgents", "SubagentLimits", "create_agent",
           "load_definitions", "parse_definition", "tool_schema", "tool_table"]
