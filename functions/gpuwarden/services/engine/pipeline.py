"""The one disruption sequence, stage by stage, in the order a notice runs them
(docs/architecture.md, "The pipeline"); `engine.disrupt` runs them from a notice to its answer:

1. resolve the node — `disrupt.disrupt` (`node_ops.find_node`);
2. admission — the kind's plan (`disrupt`), then `guard_and_mark`: guards, the mark (cordon +
   taint + annotations, one write), `after_mark`;
3. delivery — `run_steps`: the checkpoint requests first, the replacement, the first drain rounds,
   then the drain workflow (deployed) or the local loop;
4. the rounds — `round_of`, one round and the kind's settle, re-entrant: the drain workflow runs it
   once per step, `drain_to_end` loops it here;
5. after a failure past the mark — `hand_on`: what is left goes to the drain workflow;
6. the answer — the kind's `Settlement.answer` or `Admission.stopped` (`disrupt`).

A kind changes a stage only through its hooks (`engine.hooks`: `Admission`, `Delivery`,
`Settlement`); whether a PDB may be overridden at the deadline is its own `voluntary`
(`Deps.is_voluntary`). The stages live in `engine.sequence` (one run on one node) and
`engine.rounds` (the drain's rounds); this module names them in their order.
"""

from __future__ import annotations

from gpuwarden.services.engine.rounds import drain_to_end, round_of
from gpuwarden.services.engine.sequence import guard_and_mark, hand_on, run_steps

__all__ = ["drain_to_end", "guard_and_mark", "hand_on", "round_of", "run_steps"]
