"""The ReAct diagnosis agent: model interface, tools, and the loop."""
