"""Every name tether knows, one table per kind of thing: algorithms, generation engines, stages,
reward kinds and environments (each module one table), with the plugin loading and name
ownership they share (:mod:`tether.registry.plugins`). The bottom layer: nothing here imports
torch or the code its entries name (``"module:attr"`` strings, imported when used)."""
