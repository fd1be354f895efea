"""Demo scenes, one module per kind; `sim.demo.SCENES` lists them in order."""
