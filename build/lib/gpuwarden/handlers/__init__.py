"""One module per Lambda entry point: decorators, parse, one service call, return JSON."""
