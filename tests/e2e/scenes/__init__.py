"""The scenes: one file per behaviour, each built on the one real plane with what world.py and
scene.py share (docs/realplane.md, "The scenes")."""
