"""Which test holds the contract test of each shipped provider definition (providers/NAME.yaml).

tests/targets/test_provider_contracts.py fails when a shipped definition has no entry here,
or its entry names a file that does not exist or does not mention the provider. A new
definition adds one line: its name and the test file (relative to the repo root) that runs
it against a fake server checking the request shape and the response mapping.
"""

from __future__ import annotations

CONTRACTS: dict[str, str] = {
    "openai": "tests/targets/test_provider_target.py",
    "anthropic": "tests/targets/test_provider_target.py",
    "ollama": "tests/targets/test_provider_params.py",
    # the OpenAI-compatible hosts (extends: openai)
    "groq": "tests/targets/test_openai_compatible_hosts.py",
    "together": "tests/targets/test_openai_compatible_hosts.py",
    "fireworks": "tests/targets/test_openai_compatible_hosts.py",
    "deepseek": "tests/targets/test_openai_compatible_hosts.py",
    "openrouter": "tests/targets/test_openai_compatible_hosts.py",
    "xai": "tests/targets/test_openai_compatible_hosts.py",
    "perplexity": "tests/targets/test_openai_compatible_hosts.py",
    "vllm": "tests/targets/test_openai_compatible_hosts.py",
    "lmstudio": "tests/targets/test_openai_compatible_hosts.py",
    # definitions of their own
    "openai-responses": "tests/targets/test_provider_contracts_openai_responses.py",
    "azure-openai": "tests/targets/test_provider_contracts_azure_openai.py",
    "gemini": "tests/targets/test_provider_contracts_gemini.py",
    "mistral": "tests/targets/test_provider_contracts_mistral.py",
    "cohere": "tests/targets/test_provider_contracts_cohere.py",
    # signed or token auth (auth: kinds)
    "bedrock": "tests/targets/test_auth_kinds.py",
    "vertex": "tests/targets/test_auth_kinds.py",
    "vertex-anthropic": "tests/targets/test_provider_contracts_vertex_anthropic.py",
}
