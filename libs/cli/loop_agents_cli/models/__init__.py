"""Where the model is: endpoint settings and resolution, the bundled local server, transports.

Nothing here knows about loops: these modules find and configure a chat model for the
layers above (the demos, the evals, the command, the served graphs).

- `settings`: `ModelSettings`, read from the environment and ``.env``
  (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``LOOP_AGENTS_MODEL``, ...);
- `endpoints`: `resolve_endpoint`, the one resolution order of every command (options,
  environment, a running Ollama, the bundled model) and the chat-model factory;
- `ollama`: finding a running Ollama server;
- `local_model`: the bundled offline model (llama.cpp's server with SmolLM2-135M);
- `llama_cpp_http`: an HTTP transport that smooths llama.cpp's deviations from OpenAI's API.
"""
