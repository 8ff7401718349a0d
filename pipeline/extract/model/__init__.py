"""Model backends: the OpenAI-compatible client, answer parsing and evidence, the vLLM pool, prompts."""
