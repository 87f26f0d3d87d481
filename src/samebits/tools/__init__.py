"""OpenAI tool calling, independent of the server: the request's tools and tool choice
(`spec`), the wire formats models write calls in (`parsers`: Hermes, Llama 3 JSON, Mistral),
the readers the parsers scan partial outputs with (`scan`), the grammar that forces a call
in a format (`grammar`) and the streaming of calls in OpenAI's delta shape (`stream`).
Nothing here imports the server or the runtime."""

from samebits.tools.calls import ParsedOutput, ToolCall
from samebits.tools.spec import Tool, ToolChoice, parse_tool_choice, parse_tools

__all__ = ["ParsedOutput", "Tool", "ToolCall", "ToolChoice", "parse_tool_choice", "parse_tools"]
