"""API keys from a Prefect Secret block, as an alternative to the environment or `.env`.

Why in flows/: a block lives on the Prefect server, so only code that already talks to it loads one. The key is
read inside the run, never passed as a flow parameter (parameters are stored and shown in the UI).
"""

from __future__ import annotations

from prefect.blocks.system import Secret
from pydantic import SecretStr

from pipeline.settings import Settings, clean_api_key


async def with_block_key(settings: Settings) -> Settings:
    """Fill the OpenAI-compatible key from the Secret block named in IDFLOW_OPENAI_KEY_BLOCK, if the
    environment and `.env` did not set one."""
    block = settings.openai.key_block
    if not block or settings.openai.api_key is not None:
        return settings
    secret = await Secret.aload(block)
    settings.openai.api_key = SecretStr(clean_api_key(str(secret.get())))  # type: ignore[arg-type]
    return settings
