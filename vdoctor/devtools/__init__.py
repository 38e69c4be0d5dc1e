"""Development tools shipped with the package: a local OpenAI-compatible model server."""
