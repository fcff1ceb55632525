"""Where the model is: settings, endpoints, Ollama, the bundled llama.cpp server, transports."""
