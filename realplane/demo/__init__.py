"""The demo's front ends on the real plane: `tour` (`gpuwarden demo --real`) and `sandbox`
(`gpuwarden demo --real --serve`)."""
