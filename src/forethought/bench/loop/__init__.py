"""The loop bench: a scripted model drives a client on the real SDKs whose MCP tools run direct, through the MCP
proxy, or through ``forethought serve`` (``runner``); its tasks (``workload``), arms (``arms``), client
(``agent``), the bench's notes server (``notes_server``), the linked shim until the proxy has its link
(``shim``), recorders of both ends of the model path (``recording``) and the command (``command``)."""
