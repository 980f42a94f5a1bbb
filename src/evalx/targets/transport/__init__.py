"""How remote targets talk: one HTTP client with retries, SSE parsing, rate limits and the response cache."""
