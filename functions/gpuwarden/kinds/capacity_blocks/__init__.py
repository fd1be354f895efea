"""The Capacity Block kinds' room: `capacity-block-plan` (a block delivered: its end planned) and
`capacity-block-expiry` (EC2's warning before the block ends), their specs (`plan`, `expiry`) and
the use case they share (`use_case`: a block's nodes side by side, its plans)."""
