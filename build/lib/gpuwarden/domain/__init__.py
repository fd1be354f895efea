"""Pure decisions: no I/O, no clock, no kubernetes or boto3 types."""
