"""Where records go besides the processor: the dead-letter queue and the raw S3 sink."""
