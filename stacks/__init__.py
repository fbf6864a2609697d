"""The CDK app's constructs (one per logical unit), the stacks that compose them, and the typed settings."""
