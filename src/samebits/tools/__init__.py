"""OpenAI tool calling, independent of the server: the request's tools and tool choice
(`spec`), the wire formats models write calls in (`parsers`: Hermes, Llama 3 JSON, Mistral),
the grammar that forces a call in a format (`grammar`) and the streaming of parsed calls
(`stream`). Nothing here imports the server or the runtime."""

from samebits.tools.calls import ParsedOutput, ToolCall
from samebits.tools.spec import Tool, ToolChoice, parse_tool_choice, parse_tools

__all__ = ["ParsedOutput", "Tool", "ToolCall", "ToolChoice", "parse_tool_choice", "parse_tools"]
