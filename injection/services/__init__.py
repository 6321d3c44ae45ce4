"""What goes back to agents: access checks, the T0–T4 context blocks, turn sync and read models.
Every REST endpoint, MCP tool, hook and command calls these."""
