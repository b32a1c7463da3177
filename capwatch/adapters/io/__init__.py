"""The I/O clients the daemon runs on: Kafka, JSONL files, the HTTP agent client, the planner."""
