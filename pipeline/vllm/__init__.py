"""Local vLLM worker pool: server commands derived from the pipeline config, launcher, start-up watchdog.

Nothing here imports the `vllm` package: servers are separate processes (`pip install 'idflow[vllm]'` on the
GPU host only), so CI and CPU machines never need it.
"""
