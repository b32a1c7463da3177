"""The agent-side SDK: what an agent developer embeds so capwatch can watch and question it."""
